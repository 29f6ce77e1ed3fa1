package prog

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
)

// Serve serves the default mux on addr until an interrupt, after printing
// where to look (http://addr + path); the interrupt closes the server and
// Serve returns nil. Any other end of serving is its error.
func Serve(addr, path string) error {
	srv := &http.Server{Addr: addr}
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt)
		<-sig
		srv.Close()
	}()
	fmt.Printf("serving http://%s%s (interrupt to stop)\n", addr, path)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
