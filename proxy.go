package replaysafe

import (
	"net/http"
	"net/url"
	"strconv"
	"sync"

	"github.com/replaysafe/replaysafe/transports/proxy"
)

// ProxyCredentials are the credentials presented at one proxy hop: Basic
// Proxy-Authorization at an HTTP or HTTPS proxy, username/password at a
// SOCKS5 proxy. Its String hides the password.
type ProxyCredentials struct {
	// ID names the credentials in the pool key and in logs; it must never
	// contain the secret (a user name with a vault entry's version, for
	// example). Empty means the user name and a keyed hash of the
	// password, with a key drawn once per process.
	ID       string
	Username string
	Password string
}

// String prints the identity and the user name and hides the password.
func (c ProxyCredentials) String() string {
	return "ProxyCredentials{" + strconv.Quote(c.ID) + ", " + strconv.Quote(c.Username) + ", password hidden}"
}

// GoString hides the password from %#v as well.
func (c ProxyCredentials) GoString() string { return c.String() }

// ProxyFromEnvironment returns the proxy for req from HTTP_PROXY,
// HTTPS_PROXY and NO_PROXY (or their lower-case forms), read on its first
// call, as net/http's ProxyFromEnvironment does. Unlike it, NO_PROXY
// matching takes implicit ports into account ("h:80" matches
// "http://h"; see proxy.Selector). It returns nil for no proxy.
func ProxyFromEnvironment(req *http.Request) (*url.URL, error) {
	return envSelector().Proxy(req.URL)
}

var envSelector = sync.OnceValue(proxy.SelectorFromEnvironment)
