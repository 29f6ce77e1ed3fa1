package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// recordedTable is a table taken on a GPU by `cudatruth -json` and
// committed under testdata (h100-driver580-cuda13.0.json).
type recordedTable struct {
	GPU, Driver, Runtime, Date, Command string
	Results                             []truthResult
}

// against compares the runtime's verdicts in rows with the recorded table
// in path and writes one "changed:" line per case whose verdict differs
// (a case the table lacks or skipped is not compared), then a summary. A
// changed verdict is a finding for the reader, never hidden: it does not
// change the exit code.
func against(path string, rows []Row, w io.Writer) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var rec recordedTable
	if err := json.Unmarshal(b, &rec); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	was := map[string]string{}
	for _, r := range rec.Results {
		if r.Skipped == "" {
			was[r.Case.String()] = verdict(r.Code != 0, r.Invalidated())
		}
	}
	compared, changed := 0, 0
	for _, r := range rows {
		old, ok := was[r.Case]
		if !ok || r.CUDA == verdictSkipped || r.CUDA == verdictNotRun {
			continue
		}
		compared++
		if r.CUDA != old {
			changed++
			fmt.Fprintf(w, "changed: %s: recorded %s (%s), now %s\n", r.Case, old, rec.GPU, r.CUDA)
		}
	}
	fmt.Fprintf(w, "against %s (%s, driver %s): %d case(s) compared, %d verdict(s) changed\n", path, rec.GPU, rec.Driver, compared, changed)
	return nil
}
