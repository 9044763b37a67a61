module github.com/replaysafe/replaysafe

go 1.26.0

require (
	go.uber.org/goleak v1.3.0
	golang.org/x/net v0.62.0
	pgregory.net/rapid v1.3.0
)

require golang.org/x/text v0.43.0 // indirect
