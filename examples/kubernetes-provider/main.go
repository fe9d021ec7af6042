// Command aperio-kubernetes-provider is a reference scaling provider for
// Aperio on Kubernetes: it receives the server's scaling calls and sets the
// replicas of the one Deployment or StatefulSet of its namespace whose
// aperio.dev/hostname annotation names the call's hostname, through the
// object's scale subresource. It is meant to be copied and adapted;
// docs/kubernetes.md walks through it and deploy/kubernetes/ runs it.
//
//	POST /scale    Aperio's call (docs/autoscaling.md); 200 with the object
//	               and its replicas, the same answer for a repeated
//	               Idempotency-Key, 401 without the secret, 404 when no
//	               object is annotated for the hostname, 409 when several
//	               are, 503 with Retry-After when the API server failed
//	POST /events   Aperio's webhook deliveries (docs/webhooks.md): an
//	               instance_retired event lowers the replicas by one
//	               (retire.go); 404 without a webhook secret, 401 unless
//	               signed, 200 for other events and for one already applied
//	GET  /healthz  "ok"
//
// Usage:
//
//	PROVIDER_SECRET=... aperio-kubernetes-provider [--listen :9000]
//	    [--namespace NS] [--selector LABELS] [--kubeconfig FILE]
//	    [--max-replicas 100] [--api-timeout 8s] [--key-ttl 10m]
//	    [--clock-skew 2s]
//
// The secret may instead be read from the file PROVIDER_SECRET_FILE names
// (a mounted Secret). The webhook secret that verifies POST /events comes
// likewise from PROVIDER_WEBHOOK_SECRET or PROVIDER_WEBHOOK_SECRET_FILE;
// without either, POST /events answers 404. Without --kubeconfig (or KUBECONFIG) it uses the
// pod's service account. The namespace defaults to PROVIDER_NAMESPACE, then
// the service account's namespace, then "default".
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// serviceAccountNamespace is where Kubernetes mounts the pod's namespace.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// maxSecretFileBytes bounds the secret file read at startup.
const maxSecretFileBytes = 4 << 10

// options is the parsed command line and environment.
type options struct {
	Listen     string
	Kubeconfig string
	Config     Config
}

func main() {
	opts, err := parseOptions(os.Args[1:], os.Getenv, readFileLimited, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "aperio-kubernetes-provider: %v\n", err)
		os.Exit(2)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	opts.Config.Logger = logger
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, opts, logger); err != nil {
		logger.Error("provider stopped", logKeyError, err)
		stop()
		os.Exit(1)
	}
}

// readFileLimited reads at most maxSecretFileBytes of a file.
func readFileLimited(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSecretFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxSecretFileBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxSecretFileBytes)
	}
	return b, nil
}

// parseOptions reads flags from args and the rest through getenv and
// readFile.
func parseOptions(args []string, getenv func(string) string, readFile func(string) ([]byte, error), usage io.Writer) (options, error) {
	fs := flag.NewFlagSet("aperio-kubernetes-provider", flag.ContinueOnError)
	fs.SetOutput(usage)
	var o options
	maxReplicas := fs.Int("max-replicas", 100, "`count` no object is ever scaled above, whatever the call says")
	fs.StringVar(&o.Listen, "listen", ":9000", "TCP `address` to serve the scaling calls on")
	fs.StringVar(&o.Config.Namespace, "namespace", "", "`namespace` whose objects are scaled (default: PROVIDER_NAMESPACE, the service account's, or \"default\")")
	fs.StringVar(&o.Config.Selector, "selector", "", "label `selector` narrowing the objects listed (the annotation still decides)")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", getenv("KUBECONFIG"), "kubeconfig `file`; empty uses the pod's service account")
	fs.DurationVar(&o.Config.APITimeout, "api-timeout", 8*time.Second, "bound on one call's Kubernetes API requests")
	fs.DurationVar(&o.Config.KeyTTL, "key-ttl", 10*time.Minute, "how long an Idempotency-Key's answer is replayed")
	fs.DurationVar(&o.Config.ClockSkew, "clock-skew", 2*time.Second, "how far the Aperio servers' clocks may run ahead of the provider's: a retirement less than this after a scaling call replaces its pod instead of lowering")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	var errs []error
	if *maxReplicas < 1 || *maxReplicas > 1<<20 {
		errs = append(errs, fmt.Errorf("--max-replicas %d is not in [1, %d]", *maxReplicas, 1<<20))
	}
	o.Config.MaxReplicas = int32(min(max(*maxReplicas, 0), 1<<20))
	if o.Config.APITimeout <= 0 || o.Config.KeyTTL <= 0 {
		errs = append(errs, errors.New("--api-timeout and --key-ttl must be positive"))
	}
	if o.Config.ClockSkew <= 0 || o.Config.ClockSkew > time.Minute {
		errs = append(errs, errors.New("--clock-skew must be in (0, 1m]"))
	}

	o.Config.Secret = getenv("PROVIDER_SECRET")
	if file := getenv("PROVIDER_SECRET_FILE"); o.Config.Secret == "" && file != "" {
		b, err := readFile(file)
		if err != nil {
			errs = append(errs, fmt.Errorf("PROVIDER_SECRET_FILE: %w", err))
		}
		o.Config.Secret = strings.TrimRight(string(b), "\r\n")
	}
	if o.Config.Secret == "" {
		errs = append(errs, errors.New("neither PROVIDER_SECRET nor PROVIDER_SECRET_FILE gives a secret: Aperio's calls must be authenticated"))
	}
	o.Config.WebhookSecret = getenv("PROVIDER_WEBHOOK_SECRET")
	if file := getenv("PROVIDER_WEBHOOK_SECRET_FILE"); o.Config.WebhookSecret == "" && file != "" {
		b, err := readFile(file)
		if err != nil {
			errs = append(errs, fmt.Errorf("PROVIDER_WEBHOOK_SECRET_FILE: %w", err))
		}
		o.Config.WebhookSecret = strings.TrimRight(string(b), "\r\n")
		if err == nil && o.Config.WebhookSecret == "" {
			errs = append(errs, errors.New("PROVIDER_WEBHOOK_SECRET_FILE: the file is empty"))
		}
	}
	if o.Config.WebhookSecret != "" {
		if _, err := webhookKey(o.Config.WebhookSecret); err != nil {
			errs = append(errs, fmt.Errorf("webhook secret: %w", err))
		}
	}

	if o.Config.Namespace == "" {
		o.Config.Namespace = getenv("PROVIDER_NAMESPACE")
	}
	if o.Config.Namespace == "" {
		if b, err := readFile(serviceAccountNamespace); err == nil {
			o.Config.Namespace = strings.TrimSpace(string(b))
		}
	}
	if o.Config.Namespace == "" {
		o.Config.Namespace = "default"
	}
	for _, msg := range validation.IsDNS1123Label(o.Config.Namespace) {
		errs = append(errs, fmt.Errorf("namespace %q: %s", o.Config.Namespace, msg))
	}
	if _, err := labels.Parse(o.Config.Selector); err != nil {
		errs = append(errs, fmt.Errorf("--selector: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return options{}, err
	}
	return o, nil
}

// kubeClient builds the Kubernetes client: from the kubeconfig file when
// one is named, else from the pod's service account.
func kubeClient(kubeconfig string, timeout time.Duration) (kubernetes.Interface, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes config: %w", err)
	}
	cfg.UserAgent = "aperio-kubernetes-provider"
	cfg.Timeout = timeout
	return kubernetes.NewForConfig(cfg)
}

// run serves until ctx is done, then shuts down.
func run(ctx context.Context, o options, logger *slog.Logger) error {
	kube, err := kubeClient(o.Kubeconfig, o.Config.APITimeout)
	if err != nil {
		return err
	}
	p, err := newProvider(o.Config, kube, time.Now)
	if err != nil {
		return err
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", o.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	return serve(ctx, ln, newServer(p.routes()), logger, o.Config)
}

// newServer bounds every phase of a request: the provider answers within
// its API timeout, so a connection that takes longer is not Aperio.
func newServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    16 << 10,
	}
}

// serve runs srv on ln until ctx is done, then shuts it down.
func serve(ctx context.Context, ln net.Listener, srv *http.Server, logger *slog.Logger, cfg Config) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	logger.Info("provider listening", "addr", ln.Addr().String(), "namespace", cfg.Namespace, "selector", cfg.Selector,
		"events", cfg.WebhookSecret != "")
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, stop := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer stop()
	err := srv.Shutdown(shutdownCtx)
	if serveErr := <-errc; !errors.Is(serveErr, http.ErrServerClosed) {
		err = errors.Join(err, serveErr)
	}
	return err
}
