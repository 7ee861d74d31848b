// Command hello is the quickstart's stand-in service: it answers every
// request with a line naming the path and the client sluice forwarded.
//
//	go run ./examples/hello -listen 127.0.0.1:9000
package main

import (
	"flag"
	"fmt"
	"log"
	"net/http"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9000", "address to serve on")
	flag.Parse()
	srv := &http.Server{
		Addr:              *listen,
		ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "hello from %s (client %s)\n", r.URL.Path, r.Header.Get("X-Forwarded-For"))
		}),
	}
	log.Printf("hello: serving on %s", *listen)
	log.Fatal(srv.ListenAndServe())
}
