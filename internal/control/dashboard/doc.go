// Package dashboard is the operators' web dashboard, served by
// aperio-server under /aperio/: server-rendered pages (html/template), their
// message catalogs, and the embedded, dependency-free scripts and styles
// that make them live. It holds no state and no credential of its own:
// every page reads and changes the ingress through the admin API, called
// in process with the browser's session cookie, so the API's
// authentication, roles, organization scoping and CSRF check decide what a
// page may show and do (docs/dashboard.md).
package dashboard
