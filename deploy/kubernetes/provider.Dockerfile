# The provider's image: one static binary, nothing else. Build it from the
# repository's root:
#
#   (cd examples/kubernetes-provider && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o ../../bin/aperio-kubernetes-provider .)
#   docker build -f deploy/kubernetes/provider.Dockerfile -t aperio-kubernetes-provider:local bin
#
# It talks to the API server with the pod's service account (token and CA
# are mounted by Kubernetes), so the image needs no CA bundle.
FROM scratch
COPY aperio-kubernetes-provider /aperio-kubernetes-provider
USER 65532:65532
ENTRYPOINT ["/aperio-kubernetes-provider"]
