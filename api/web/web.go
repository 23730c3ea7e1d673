// Package web holds the browser app's built bundle (api/web/dist, built from
// api/web/src with `make web`), embedded so the binary serves it without Node.
package web

import (
	"embed"
	"io/fs"
)

//go:embed all:dist
var dist embed.FS

// FS is the bundle: index.html at its root, content-hashed files under
// assets/.
func FS() fs.FS {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		panic("web: the embedded bundle has no dist folder: " + err.Error())
	}
	return sub
}
