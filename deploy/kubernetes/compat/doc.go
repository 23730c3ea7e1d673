// Package compat renders Ballet's kustomizations with the kustomize built
// into older kubectl versions, which the manifests support, and compares
// the output with what the newest kustomize renders
// (../testdata/rendered). One module holds one version of kustomize/api:
// go.mod pins kubectl 1.31's (kustomize v5.4.2), kubectl130.mod kubectl
// 1.30's (run with go test -modfile=kubectl130.mod).
package compat
