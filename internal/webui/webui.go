package webui

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed assets
var assets embed.FS

// MountAssets serves the shared assets (style.css, live.js) under prefix, a path
// ending in "/": e.g. "/ui/common/" serves /ui/common/style.css.
func MountAssets(mux *http.ServeMux, prefix string) {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded directory is part of the build
	}
	mux.Handle("GET "+prefix, http.StripPrefix(prefix, http.FileServerFS(sub)))
}

// Secure sets headers that keep a page to its own assets: no inline script runs,
// nothing loads from elsewhere, and no other site frames it.
func Secure(w http.ResponseWriter, contentType string) {
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; frame-ancestors 'none'")
}
