package replaysafe_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs the tests without the machine's proxy settings: a
// Transport whose Proxy is nil reads them (ProxyFromEnvironment), and the
// tests' own servers are not behind the machine's proxy. A child process
// that tests the environment keeps what its parent set.
func TestMain(m *testing.M) {
	if os.Getenv("REPLAYSAFE_ENV_PROXY_CHILD") == "" && os.Getenv("REPLAYSAFE_ENV_SELECTOR_CHILD") == "" {
		for _, v := range []string{"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "REQUEST_METHOD", "http_proxy", "https_proxy", "no_proxy"} {
			os.Unsetenv(v)
		}
	}
	goleak.VerifyTestMain(m)
}
