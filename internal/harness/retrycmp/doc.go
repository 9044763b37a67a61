// Package retrycmp measures, at the server, how many copies of a request
// the retry libraries users pick today send on the faults a retry policy meets,
// beside net/http and replaysafe: go-retryablehttp (v0.7.8) with its
// defaults, and resty (v2) with its defaults and with SetRetryCount(3).
//
// Every run starts its own replaysafetest server on 127.0.0.1 and a fresh
// client instance, warms a keep-alive connection when the scenario needs a
// reused one, sends the target request under a bounded context, stops the
// server and counts the complete copies it recorded, checking that they
// are byte-identical and carry the caller's body. Run gives one Row per
// scenario and client; Print and Markdown format them.
//
// A Client is a name and a constructor of Senders, so another
// configuration (replaysafe with Options.Retry, say) joins the comparison
// through HTTPClient without changes here.
package retrycmp
