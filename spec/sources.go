package spec

import "strings"

// Source is one document a rule's Source field names: a reference the
// project started from, an RFC, or replaysafe's own choice.
type Source struct {
	// Name is how rule sources cite it: "RFC 9110", "replaysafe",
	// "request-dispatch-guarantees".
	Name string
	// Title says what the document is, in one line.
	Title string
	// Doc is the file under docs/ that explains it, with an anchor when
	// several sources share a file.
	Doc string
	// Summary says what the rules take from it.
	Summary string
}

var sources = []Source{
	{
		Name:    "replaysafe",
		Title:   "replaysafe's own choice, where the other sources are silent or could be read two ways",
		Doc:     "sources/replaysafe.md",
		Summary: "The reading that can never send a duplicate; each choice and its reason is listed in spec/choices.md.",
	},
	{
		Name:    "request-dispatch-guarantees",
		Title:   "\"Request Dispatch Guarantees\", the dispatch contract of the aioduct HTTP client (Rust)",
		Doc:     "sources/request-dispatch-guarantees.md",
		Summary: "Body replayability is not a replay permission; evidence of non-processing (REFUSED_STREAM, GOAWAY boundaries, H3_REQUEST_REJECTED, a request handed back before serialisation); a consumed one-shot body is never replaced by an empty one; one route snapshot and one acquisition deadline per attempt.",
	},
	{
		Name:    "resend-idempotent-on-reused-connection",
		Title:   "\"Resend idempotent requests when a reused connection was closed\", a pull request to the Ruby HTTP client http.rb",
		Doc:     "sources/resend-idempotent-on-reused-connection.md",
		Summary: "The gates for resending after a stale reused connection: the connection was reused, no response byte arrived (not even a 1xx), the method is idempotent or keyed, the body can be produced again, the failure is no timeout, no user retry policy; and a resend is never resent.",
	},
	{
		Name:    "RFC 9110",
		Title:   "HTTP Semantics",
		Doc:     "sources/rfcs.md#rfc-9110",
		Summary: "§9.2.2: which methods are idempotent, and that a client should not retry a failed automatic retry; §10.2.3: Retry-After; §15: status codes.",
	},
	{
		Name:    "RFC 9112",
		Title:   "HTTP/1.1",
		Doc:     "sources/rfcs.md#rfc-9112",
		Summary: "§9.3: persistent connections, when a connection can carry the next request.",
	},
	{
		Name:    "RFC 9113",
		Title:   "HTTP/2",
		Doc:     "sources/rfcs.md#rfc-9113",
		Summary: "§6.8: GOAWAY and its last stream ID; §8.7: REFUSED_STREAM means the stream was not processed.",
	},
	{
		Name:    "RFC 9114",
		Title:   "HTTP/3",
		Doc:     "sources/rfcs.md#rfc-9114",
		Summary: "§4.1.1 and §8.1: H3_REQUEST_REJECTED; §5.2: GOAWAY and the first unprocessed stream ID.",
	},
	{
		Name:    "RFC 8470",
		Title:   "Using Early Data in HTTP",
		Doc:     "sources/rfcs.md#rfc-8470",
		Summary: "§2: requests in rejected early data are sent again; §4: only safe methods go in early data; §5.2: 425 Too Early means the request was not processed; retry it once the handshake is complete, never in early data.",
	},
	{
		Name:    "RFC 6585",
		Title:   "Additional HTTP Status Codes",
		Doc:     "sources/rfcs.md#rfc-6585",
		Summary: "§4: 429 Too Many Requests and its Retry-After.",
	},
}

// Sources returns every source the rules cite.
func Sources() []Source { return append([]Source(nil), sources...) }

// LookupSource returns the source of that name.
func LookupSource(name string) (Source, bool) {
	for _, s := range sources {
		if s.Name == name {
			return s, true
		}
	}
	return Source{}, false
}

// SourcePart is one citation of a rule's Source field: the source's name
// and what follows it (a section, a note in parentheses).
type SourcePart struct {
	Name string
	Rest string
}

// SourceParts splits a rule's Source field ("RFC 9110 §9.2.2;
// resend-idempotent-on-reused-connection") into its citations.
func SourceParts(source string) []SourcePart {
	var out []SourcePart
	for part := range strings.SplitSeq(source, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		n := strings.IndexAny(part, " (")
		if n < 0 {
			n = len(part)
		}
		if strings.HasPrefix(part, "RFC ") {
			m := strings.IndexAny(part[4:], " (")
			if m < 0 {
				m = len(part) - 4
			}
			n = 4 + m
		}
		out = append(out, SourcePart{Name: part[:n], Rest: part[n:]})
	}
	return out
}

// SourceNames returns the names of the sources a rule cites, each once, in
// the order cited.
func (r Rule) SourceNames() []string {
	var out []string
	for _, p := range SourceParts(r.Source) {
		if !contains(out, p.Name) {
			out = append(out, p.Name)
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
