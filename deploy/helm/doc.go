// Package helm holds the checks of the aperio Helm chart (deploy/helm/aperio)
// and of the plain manifests in deploy/kubernetes. It is a module of its
// own so that Helm's library, which the tests render the chart with, never
// enters Aperio's go.mod or binaries.
package helm
