package fuzz

import (
	"encoding/binary"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"math"
	"reflect"
	"strconv"
	"strings"
)

// This file converts seeds between the two engines that run the targets.
// go test -fuzz reads a seed as a file of Go's corpus format, one typed
// value a line. A libFuzzer build made by go-118-fuzz-build hands the
// target one flat byte string, which its testing.F cuts into the fuzz
// function's arguments with go-fuzz-headers' consumer
// (github.com/AdaLogics/go-fuzz-headers, the version go-118-fuzz-build's
// go.mod requires): a []byte or a string is a 4-byte big-endian length
// and its bytes, a bool one byte (even is true), a uint16 or an int16 two
// bytes and a byte for their order, a 64-bit integer eight and that byte,
// a 32-bit integer four, a byte-sized one one. LibFuzzerInput writes that
// string; libFuzzerArgs reads it back as the consumer does.

// corpusHeader is the first line of a file of Go's corpus format.
const corpusHeader = "go test fuzz v1"

// ParseCorpusFile reads a seed file of Go's corpus format (the header line,
// then one value a line, such as []byte("..."), string("..."), bool(true)
// or uint16(7)) and returns its values. Integer (a byte or a rune also as
// a character literal), bool, string and []byte values are read; floats
// are not.
func ParseCorpusFile(b []byte) ([]any, error) {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) == 0 || lines[0] != corpusHeader {
		return nil, fmt.Errorf("not a seed file: the first line is not %q", corpusHeader)
	}
	var out []any
	for i, line := range lines[1:] {
		v, err := parseCorpusValue(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", i+2, err)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, errors.New("a seed file with no value")
	}
	return out, nil
}

// parseCorpusValue reads one line of a seed file: a conversion of a
// literal to its type.
func parseCorpusValue(line string) (any, error) {
	expr, err := parser.ParseExpr(line)
	if err != nil {
		return nil, err
	}
	call, ok := expr.(*ast.CallExpr)
	if !ok || len(call.Args) != 1 {
		return nil, fmt.Errorf("%q is not a typed value", line)
	}
	typ := ""
	switch fun := call.Fun.(type) {
	case *ast.Ident:
		typ = fun.Name
	case *ast.ArrayType:
		if elt, ok := fun.Elt.(*ast.Ident); ok && fun.Len == nil && (elt.Name == "byte" || elt.Name == "uint8") {
			typ = "[]byte"
		}
	}
	arg, neg := call.Args[0], false
	if u, ok := arg.(*ast.UnaryExpr); ok && u.Op == token.SUB {
		arg, neg = u.X, true
	}
	if id, ok := arg.(*ast.Ident); ok && typ == "bool" && !neg && (id.Name == "true" || id.Name == "false") {
		return id.Name == "true", nil
	}
	lit, ok := arg.(*ast.BasicLit)
	if !ok {
		return nil, fmt.Errorf("%q: the value is not a literal", line)
	}
	switch typ {
	case "[]byte", "string":
		if lit.Kind != token.STRING || neg {
			return nil, fmt.Errorf("%q: want a string literal", line)
		}
		s, err := strconv.Unquote(lit.Value)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", line, err)
		}
		if typ == "string" {
			return s, nil
		}
		return []byte(s), nil
	}
	kind, ok := intKinds[typ]
	if !ok || (lit.Kind != token.INT && lit.Kind != token.CHAR) {
		return nil, fmt.Errorf("%q: type %s is not read here", line, typ)
	}
	text := lit.Value
	if lit.Kind == token.CHAR { // go writes a byte or a rune as a character literal
		r, _, tail, err := strconv.UnquoteChar(text[1:len(text)-1], '\'')
		if err != nil || tail != "" {
			return nil, fmt.Errorf("%q: a bad character literal", line)
		}
		text = strconv.Itoa(int(r))
	}
	if neg {
		text = "-" + text
	}
	v := reflect.New(kind).Elem()
	if v.CanInt() {
		n, err := strconv.ParseInt(text, 0, kind.Bits())
		if err != nil {
			return nil, fmt.Errorf("%q: %w", line, err)
		}
		v.SetInt(n)
	} else {
		n, err := strconv.ParseUint(text, 0, kind.Bits())
		if err != nil {
			return nil, fmt.Errorf("%q: %w", line, err)
		}
		v.SetUint(n)
	}
	return v.Interface(), nil
}

// intKinds are the integer types a seed file can name.
var intKinds = map[string]reflect.Type{
	"int": reflect.TypeFor[int](), "int8": reflect.TypeFor[int8](), "int16": reflect.TypeFor[int16](),
	"int32": reflect.TypeFor[int32](), "int64": reflect.TypeFor[int64](), "rune": reflect.TypeFor[int32](),
	"uint": reflect.TypeFor[uint](), "uint8": reflect.TypeFor[uint8](), "byte": reflect.TypeFor[uint8](),
	"uint16": reflect.TypeFor[uint16](), "uint32": reflect.TypeFor[uint32](), "uint64": reflect.TypeFor[uint64](),
}

// LibFuzzerInput encodes a fuzz function's arguments (after its
// *testing.T) as the libFuzzer input from which go-118-fuzz-build's
// testing.F decodes the same values. Some values have no such input: an
// empty string or []byte as the last argument (the consumer fails on
// what it cannot read, and the function is then not called).
func LibFuzzerInput(args ...any) ([]byte, error) {
	var b []byte
	var lengthAt []int // where each []byte's length goes, once the rest is known
	for _, a := range args {
		switch v := a.(type) {
		case []byte:
			lengthAt = append(lengthAt, len(b))
			b = append(b, 0, 0, 0, 0)
			b = append(b, v...)
		case string:
			if len(v) > math.MaxUint32 {
				return nil, errors.New("a string too long for a 4-byte length")
			}
			b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
			b = append(b, v...)
		case bool:
			b = append(b, boolByte(v))
		default:
			rv := reflect.ValueOf(a)
			var u uint64
			switch {
			case rv.CanInt():
				u = uint64(rv.Int())
			case rv.CanUint():
				u = rv.Uint()
			default:
				return nil, fmt.Errorf("an argument of type %T, which the libFuzzer build does not decode", a)
			}
			switch rv.Type().Size() {
			case 1:
				b = append(b, byte(u))
			case 2:
				b = binary.BigEndian.AppendUint16(b, uint16(u))
				b = append(b, boolByte(false)) // big-endian
			case 4:
				b = binary.BigEndian.AppendUint32(b, uint32(u))
			default:
				b = binary.BigEndian.AppendUint64(b, u)
				b = append(b, boolByte(false))
			}
		}
	}
	// The consumer reads a []byte's length n against the bytes left after
	// the length, left: n == left takes them all, otherwise it takes n mod
	// left, and it reads 0 as 30. So a length is written as itself, and an
	// empty []byte as twice what is left.
	for i, at := range lengthAt {
		n := len(args[argIndex(args, i)].([]byte))
		left := len(b) - at - 4
		if n == 0 {
			n = 2 * left
		}
		if n > math.MaxUint32 {
			return nil, errors.New("a []byte too long for a 4-byte length")
		}
		binary.BigEndian.PutUint32(b[at:], uint32(n))
	}
	got, err := libFuzzerArgs(b, argTypes(args))
	if err != nil {
		return nil, fmt.Errorf("the values have no libFuzzer input: %w", err)
	}
	if !reflect.DeepEqual(normalize(got), normalize(args)) {
		return nil, fmt.Errorf("the libFuzzer input decodes to %v, not %v", got, args)
	}
	return b, nil
}

// argIndex returns the index in args of the i-th []byte.
func argIndex(args []any, i int) int {
	for j, a := range args {
		if _, ok := a.([]byte); ok {
			if i == 0 {
				return j
			}
			i--
		}
	}
	panic("fuzz: fewer []byte arguments than lengths")
}

func boolByte(v bool) byte {
	if v {
		return 0 // even
	}
	return 1
}

func argTypes(args []any) []reflect.Type {
	out := make([]reflect.Type, len(args))
	for i, a := range args {
		out[i] = reflect.TypeOf(a)
	}
	return out
}

// normalize makes empty and nil []byte values compare equal.
func normalize(args []any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		if b, ok := a.([]byte); ok && len(b) == 0 {
			a = []byte{}
		}
		out[i] = a
	}
	return out
}

// libFuzzerArgs decodes a libFuzzer input into arguments of the given
// types as go-118-fuzz-build's testing.F does with go-fuzz-headers'
// consumer, and fails where the consumer fails.
func libFuzzerArgs(data []byte, types []reflect.Type) ([]any, error) {
	pos := 0
	next := func(n int) ([]byte, error) {
		if pos >= len(data) || len(data)-pos < n {
			return nil, errors.New("the input ends early")
		}
		pos += n
		return data[pos-n : pos], nil
	}
	getBool := func() (bool, error) {
		b, err := next(1)
		if err != nil {
			return false, err
		}
		return b[0]%2 == 0, nil
	}
	var out []any
	for _, t := range types {
		v := reflect.New(t).Elem()
		switch {
		case t == reflect.TypeFor[[]byte]():
			l, err := next(4)
			if err != nil {
				return nil, err
			}
			n := uint32(binary.BigEndian.Uint32(l))
			if n == 0 {
				n = 30
			}
			left := uint32(len(data) - pos)
			if left == 0 {
				return nil, errors.New("no bytes left for a []byte")
			}
			if n != left {
				n %= left
			}
			v.SetBytes(data[pos : pos+int(n)])
			pos += int(n)
		case t.Kind() == reflect.String:
			if pos >= len(data) {
				return nil, errors.New("no bytes left for a string")
			}
			l, err := next(4)
			if err != nil {
				return nil, err
			}
			n := int(binary.BigEndian.Uint32(l))
			if pos > 2_000_000 { // the consumer's MaxTotalLen
				return nil, errors.New("a string past the consumer's total length")
			}
			if pos >= len(data) || n > len(data)-pos {
				return nil, errors.New("a string longer than the input")
			}
			v.SetString(string(data[pos : pos+n]))
			pos += n
		case t.Kind() == reflect.Bool:
			b, err := getBool()
			if err != nil {
				return nil, err
			}
			v.SetBool(b)
		case v.CanInt() || v.CanUint():
			var u uint64
			switch t.Size() {
			case 1:
				b, err := next(1)
				if err != nil {
					return nil, err
				}
				u = uint64(b[0])
			case 2, 8:
				b, err := next(int(t.Size()))
				if err != nil {
					return nil, err
				}
				little, err := getBool()
				if err != nil {
					return nil, err
				}
				var order binary.ByteOrder = binary.BigEndian
				if little {
					order = binary.LittleEndian
				}
				if t.Size() == 2 {
					u = uint64(order.Uint16(b))
				} else {
					u = order.Uint64(b)
				}
			case 4:
				b, err := next(4)
				if err != nil {
					return nil, err
				}
				u = uint64(binary.BigEndian.Uint32(b))
			}
			if v.CanInt() {
				v.SetInt(int64(u))
			} else {
				v.SetUint(u)
			}
		default:
			return nil, fmt.Errorf("type %v is not decoded", t)
		}
		out = append(out, v.Interface())
	}
	return out, nil
}
