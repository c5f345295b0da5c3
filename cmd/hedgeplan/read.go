package main

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// readLatencies reads one latency per line, or with csv one per record
// from column (from 1). Blank lines and lines starting with # are skipped;
// so is a CSV header, a first record whose column is not a latency. A
// bare number takes unit; without unit it is an error, since a latency
// off by a factor of a thousand would plan nonsense.
func readLatencies(r io.Reader, asCSV bool, column int, unit string) ([]time.Duration, error) {
	scale := time.Duration(0)
	if unit != "" {
		d, err := time.ParseDuration("1" + unit)
		if err != nil {
			return nil, fmt.Errorf("-unit %q: %v", unit, err)
		}
		scale = d
	}
	var out []time.Duration
	add := func(where string, field string, header bool) error {
		d, err := parseLatency(strings.TrimSpace(field), scale)
		switch {
		case err != nil && header:
			return nil // a header
		case err != nil:
			return fmt.Errorf("%s: %v", where, err)
		case d < 0:
			return fmt.Errorf("%s: negative latency %v", where, d)
		}
		out = append(out, d)
		return nil
	}
	if asCSV {
		cr := csv.NewReader(r)
		cr.FieldsPerRecord = -1
		cr.Comment = '#'
		for n := 1; ; n++ {
			rec, err := cr.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, err
			}
			if column < 1 || column > len(rec) {
				return nil, fmt.Errorf("record %d has %d columns, want column %d", n, len(rec), column)
			}
			if err := add(fmt.Sprintf("record %d", n), rec[column-1], n == 1); err != nil {
				return nil, err
			}
		}
	} else {
		sc := bufio.NewScanner(r)
		for n := 1; sc.Scan(); n++ {
			line := strings.TrimSpace(sc.Text())
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			if err := add(fmt.Sprintf("line %d", n), line, false); err != nil {
				return nil, err
			}
		}
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no latencies in the input")
	}
	return out, nil
}

func parseLatency(s string, scale time.Duration) (time.Duration, error) {
	if d, err := time.ParseDuration(s); err == nil {
		return d, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a latency (want e.g. 31ms or 0.2s)", s)
	}
	if scale == 0 {
		return 0, fmt.Errorf("%q has no unit (give one, or -unit)", s)
	}
	return time.Duration(f * float64(scale)), nil
}
