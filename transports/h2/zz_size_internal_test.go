package h2

import (
	"reflect"
	"testing"
)

func dump(t *testing.T, v any) {
	ty := reflect.TypeOf(v)
	t.Logf("== %v %d", ty, ty.Size())
	for i := 0; i < ty.NumField(); i++ {
		f := ty.Field(i)
		t.Logf("   %4d %4d %s %v", f.Offset, f.Type.Size(), f.Name, f.Type)
	}
}

func TestZZSizes(t *testing.T) {
	dump(t, stream{})
	dump(t, requestHead{})
	dump(t, recvBuf{})
}
