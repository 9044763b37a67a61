package retrycmp_test

import (
	"context"
	"log"
	"net/http"
	"os"

	"github.com/replaysafe/replaysafe"
	"github.com/replaysafe/replaysafe/internal/harness/retrycmp"
)

// A configuration of replaysafe joins the comparison as one more Client;
// its instances are built afresh for every run.
func ExampleHTTPClient() {
	tuned := retrycmp.HTTPClient("replaysafe MaxIdleConnsPerHost=1", func() *http.Client {
		return &http.Client{Transport: replaysafe.New(replaysafe.Options{MaxIdleConnsPerHost: 1})}
	})
	rows, err := retrycmp.Run(context.Background(), retrycmp.Options{
		Quick:   true,
		Clients: append(retrycmp.Peers(), tuned),
	})
	if err != nil {
		log.Fatal(err)
	}
	retrycmp.Print(os.Stdout, rows)
}
