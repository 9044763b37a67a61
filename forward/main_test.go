package forward_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs the tests without the machine's proxy settings, which
// the Forwarder's Transport would otherwise read (its Proxy is nil), and
// checks that they leave no goroutine behind.
func TestMain(m *testing.M) {
	for _, v := range []string{"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "REQUEST_METHOD", "http_proxy", "https_proxy", "no_proxy"} {
		os.Unsetenv(v)
	}
	goleak.VerifyTestMain(m)
}
