package forward

import (
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
)

// websocketGUID is the key suffix of RFC 6455 §1.3.
const websocketGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

// websocketHandshake turns out, an HTTP/2 or HTTP/3 extended CONNECT
// for the websocket protocol (RFC 8441 §5, RFC 9220), into the HTTP/1.1
// opening handshake of RFC 6455 §4.1: a GET with a fresh
// Sec-WebSocket-Key and no body (the inbound stream's body is the
// tunnel). It returns the key.
func websocketHandshake(out *http.Request) string {
	var raw [16]byte
	rand.Read(raw[:]) // crypto/rand.Read never fails
	key := base64.StdEncoding.EncodeToString(raw[:])
	out.Method = http.MethodGet
	out.Header.Set("Sec-Websocket-Key", key)
	if out.Header.Get("Sec-Websocket-Version") == "" {
		out.Header.Set("Sec-Websocket-Version", "13")
	}
	out.Body, out.ContentLength, out.Trailer = http.NoBody, 0, nil
	return key
}

// websocketAccept is the Sec-WebSocket-Accept value for key (RFC 6455
// §4.2.2).
func websocketAccept(key string) string {
	sum := sha1.Sum([]byte(key + websocketGUID))
	return base64.StdEncoding.EncodeToString(sum[:])
}

// extendedConnect completes an extended CONNECT whose HTTP/1.1 Upgrade
// upstream got 101: it checks the upstream's Sec-WebSocket-Accept,
// answers the client 200 (RFC 8441 §5) and tunnels the inbound stream's
// body and the upgraded connection into each other until the upstream
// side ends.
func (h *Forwarder) extendedConnect(w http.ResponseWriter, r *http.Request, resp *http.Response, d Dispatch, x *exchange, key string) {
	up, ok := resp.Body.(io.ReadWriteCloser)
	if !ok || resp.Header.Get("Sec-Websocket-Accept") != websocketAccept(key) {
		resp.Body.Close()
		x.err = errors.New("replaysafe: forward: the upstream's WebSocket handshake answer does not match its key")
		h.refuse(w, x, http.StatusBadGateway, "invalid WebSocket handshake from the upstream")
		return
	}
	defer up.Close()
	cleanResponseHeader(resp.Header, http.StatusOK, d)
	resp.Header.Del("Sec-Websocket-Accept")
	if !h.opt.DisableVia {
		resp.Header.Add("Via", viaValue(resp.ProtoMajor, resp.ProtoMinor, h.via))
	}
	wh := w.Header()
	for k, vv := range resp.Header {
		wh[k] = vv
	}
	w.WriteHeader(http.StatusOK)
	x.status = http.StatusOK
	if err := http.NewResponseController(w).Flush(); err != nil {
		x.err = err
		return
	}
	// The tunnel lives no longer than the inbound stream: when the client
	// cancels it or its connection closes, the request's context ends and
	// the upstream connection closes, which ends both copies. The stream's
	// clean end (the client's FIN) cannot be passed on as a half-close, as
	// net/http's upgraded body has no CloseWrite, so the upstream side
	// stays open until then.
	stop := context.AfterFunc(r.Context(), func() { up.Close() })
	defer stop()
	go func() {
		// Client to upstream; a failed inbound stream ends the tunnel.
		if _, err := io.Copy(up, r.Body); err != nil {
			up.Close()
		}
	}()
	if err := copyFlushing(w, up); err != nil && r.Context().Err() == nil {
		x.err = err
	}
}

// upgradeOverConnect completes an HTTP/1.1 WebSocket handshake that went
// upstream as an extended CONNECT (RFC 8441 §5) and got 200: it answers
// the client 101 with the Sec-WebSocket-Accept of the client's key and
// tunnels the client connection into the stream, upload being the
// stream's request body.
func (h *Forwarder) upgradeOverConnect(w http.ResponseWriter, resp *http.Response, d Dispatch, x *exchange, key string, upload *io.PipeWriter) {
	defer resp.Body.Close()
	cleanResponseHeader(resp.Header, http.StatusOK, d)
	resp.Header.Set("Connection", "Upgrade")
	resp.Header.Set("Upgrade", "websocket")
	resp.Header.Set("Sec-Websocket-Accept", websocketAccept(key))
	h.switchProtocols(w, x, resp, streamRW{resp.Body, upload})
}

// streamRW is an extended CONNECT stream as one ReadWriteCloser: the
// response body to read, the request body's pipe to write.
type streamRW struct {
	r io.ReadCloser
	w *io.PipeWriter
}

func (s streamRW) Read(p []byte) (int, error)  { return s.r.Read(p) }
func (s streamRW) Write(p []byte) (int, error) { return s.w.Write(p) }
func (s streamRW) Close() error {
	s.w.Close()
	return s.r.Close()
}
