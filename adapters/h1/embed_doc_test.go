package h1_test

import (
	"os"
	"strings"
	"testing"
)

// TestEmbeddingDocShowsTheExample: docs/embedding.md shows the client of
// Example_embedding as it is, so the guide's code is the code go test
// runs.
func TestEmbeddingDocShowsTheExample(t *testing.T) {
	src, err := os.ReadFile("embed_example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../../docs/embedding.md")
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(src), "// get sends a GET for url")
	if i < 0 {
		t.Fatal("the example has no get function")
	}
	get := strings.TrimSpace(string(src[i:]))
	if !strings.Contains(string(doc), "```go\n"+get+"\n```") {
		t.Error("docs/embedding.md does not show the example's get function as it is in embed_example_test.go")
	}
}
