package replaysafetest_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"

	"github.com/replaysafe/replaysafe/replaysafetest"
)

// A close crossing a request, made deterministic: the first connection
// answers its first request, then reads the second one in full, records
// it and closes without answering.
func Example() {
	s, err := replaysafetest.Start(replaysafetest.Config{
		Conns: []replaysafetest.ConnScript{
			replaysafetest.Script(replaysafetest.RespondThenCloseOnNext(replaysafetest.CloseFIN)),
		},
	})
	if err != nil {
		panic(err)
	}
	defer s.Close()

	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		panic(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)

	fmt.Fprint(c, "GET /a HTTP/1.1\r\nHost: origin\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		panic(err)
	}
	body, _ := io.ReadAll(resp.Body)
	fmt.Printf("response 1: %s %q\n", resp.Status, body)

	fmt.Fprint(c, "POST /b HTTP/1.1\r\nHost: origin\r\nContent-Length: 5\r\n\r\nhello")
	_, err = br.ReadByte()
	fmt.Println("response 2:", err)

	for _, r := range s.Requests() {
		fmt.Printf("conn %d seq %d: %s %s body %q (%d raw bytes)\n", r.Conn, r.Seq, r.Method, r.Target, r.Body, len(r.Raw))
	}
	// Output:
	// response 1: 200 OK "ok"
	// response 2: EOF
	// conn 0 seq 0: GET /a body "" (33 raw bytes)
	// conn 0 seq 1: POST /b body "hello" (58 raw bytes)
}

// Using a TLS server with net/http: the client trusts the server's
// self-signed certificate through ClientTLSConfig.
func Example_tls() {
	s, err := replaysafetest.Start(replaysafetest.Config{TLS: true})
	if err != nil {
		panic(err)
	}
	defer s.Close()

	tr := &http.Transport{TLSClientConfig: s.ClientTLSConfig()}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	resp, err := client.Get(s.URL() + "/hello")
	if err != nil {
		panic(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(resp.Status, string(body), resp.TLS.NegotiatedProtocol)
	fmt.Println("origin received", s.Count(), "request(s) on", s.Conns(), "connection(s)")
	// Output:
	// 200 OK ok http/1.1
	// origin received 1 request(s) on 1 connection(s)
}
