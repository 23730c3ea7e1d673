package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestPrintRounds checks the rounds table of `ballet bench turns --rounds`:
// the ratios, the fake model's CPU ratio and the ratio at equal host speed,
// and what it prints when a figure cannot be had.
func TestPrintRounds(t *testing.T) {
	t.Parallel()
	round := func(qTurns int, qTook, qModel time.Duration, dTurns int, dTook, dModel time.Duration) turnRound {
		r := turnRound{turns: map[string]int{}, took: map[string]time.Duration{}, modelCPU: map[string]time.Duration{}}
		r.turns["queue"], r.took["queue"], r.modelCPU["queue"] = qTurns, qTook, qModel
		if dTurns > 0 {
			r.turns["direct"], r.took["direct"], r.modelCPU["direct"] = dTurns, dTook, dModel
		}
		return r
	}
	s := func(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }
	for _, tc := range []struct {
		name   string
		rounds []turnRound
		want   []string
		absent []string
	}{
		{
			name: "both modes, model CPU measured",
			rounds: []turnRound{
				round(1000, s(2.5), s(1.2), 1000, s(2), s(1)),
				round(1000, s(2), s(1), 1000, s(2), s(1)),
			},
			want: []string{
				"| 1 | 400 | 500 | 0.80 | 1.20 | 0.96 |\n",
				"| 2 | 500 | 500 | 1.00 | 1.00 | 1.00 |\n",
				"| all | 444 | 500 | 0.89 | 1.10 | 0.98 |\n",
				"queue ÷ direct: median of the rounds 0.90, pooled (all turns ÷ all time of each mode) 0.89\n",
				"at equal host speed (each round's ratio × its fake model CPU ratio; 2 of 2 rounds): median 0.980, mean 0.980 ± 0.020 (standard error)\n",
			},
		},
		{
			name: "model CPU not read in one round",
			rounds: []turnRound{
				round(4, s(0.5), 0, 4, s(0.4), s(0.01)),
				round(4, s(0.4), s(0.01), 4, s(0.4), s(0.01)),
			},
			want: []string{
				"| 1 | 8 | 10 | 0.80 | – | – |\n",
				"| 2 | 10 | 10 | 1.00 | 1.00 | 1.00 |\n",
				"at equal host speed (each round's ratio × its fake model CPU ratio; 1 of 2 rounds): median 1.000, mean 1.000 ± 0.000 (standard error)\n",
			},
		},
		{
			name:   "no model CPU at all",
			rounds: []turnRound{round(4, s(0.5), 0, 4, s(0.4), 0)},
			want: []string{
				"| 1 | 8 | 10 | 0.80 | – | – |\n",
				"| all | 8 | 10 | 0.80 | – | – |\n",
				"at equal host speed: – (the fake model's CPU could not be read from /proc)\n",
			},
		},
		{
			name:   "one mode only",
			rounds: []turnRound{round(4, s(0.5), s(0.01), 0, 0, 0)},
			want:   []string{"| 1 | 8 | – | – | – | – |\n", "| all | 8 | – | – | – | – |\n"},
			absent: []string{"queue ÷ direct: median", "\nat equal host speed"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			printRounds(&out, tc.rounds)
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			for _, a := range tc.absent {
				if strings.Contains(out.String(), a) {
					t.Errorf("output has %q:\n%s", a, out.String())
				}
			}
		})
	}
}

func TestMeanSE(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		xs       []float64
		mean, se float64
	}{{nil, 0, 0}, {[]float64{0.9}, 0.9, 0}, {[]float64{0.96, 1.0}, 0.98, 0.02}, {[]float64{1, 2, 3, 4}, 2.5, 0.6454972243679028}} {
		mean, se := meanSE(tc.xs)
		if d := mean - tc.mean; d > 1e-9 || d < -1e-9 {
			t.Errorf("meanSE(%v) mean = %v, want %v", tc.xs, mean, tc.mean)
		}
		if d := se - tc.se; d > 1e-9 || d < -1e-9 {
			t.Errorf("meanSE(%v) se = %v, want %v", tc.xs, se, tc.se)
		}
	}
}
