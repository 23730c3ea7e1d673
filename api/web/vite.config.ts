import { defineConfig } from "vite";

// The bundle is committed (api/web/dist) and embedded in the Go binary, so the
// build must be reproducible: content-hashed names, no timestamps, no
// source maps pointing at a developer's paths.
export default defineConfig({
  base: "/",
  build: {
    outDir: process.env.BALLET_WEB_OUT || "dist",
    emptyOutDir: true,
    sourcemap: false,
    assetsInlineLimit: 0,
    modulePreload: { polyfill: false },
  },
  server: { proxy: { "/api": "http://127.0.0.1:8080", "/rpc": { target: "ws://127.0.0.1:8080", ws: true } } },
});
