package main

import (
	"context"
	"io"
)

func runDemo(ctx context.Context, args []string, out io.Writer) error {
	return usageError{"demo: not yet"}
}
