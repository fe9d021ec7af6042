// Package e2e is the docker-compose end-to-end suite: it builds the images
// (deploy/images/build.sh), brings up test/docker-compose.yml (PostgreSQL,
// two aperio-servers, the reference Docker provider, a test OpenID
// provider and an app behind an OIDC login), logs in through both servers
// as a browser would, and drives real app containers through cold start,
// scale out, failures and idle retirement. Its tests carry the e2e build
// tag; run them with `make e2e`.
package e2e
