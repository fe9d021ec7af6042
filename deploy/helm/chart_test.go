package helm

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// chartDir is the chart, seen from this package.
const chartDir = "aperio"

// rendered is one install of the chart, client-side only.
type rendered struct {
	objs  []runtime.Object
	notes string
}

// render installs the chart as release "aperio" in namespace "aperio"
// with the given values (YAML), the way `helm template` does: dry run,
// no cluster. Helm checks the values against values.schema.json first.
func render(t *testing.T, values string) (rendered, error) {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	vals := map[string]any{}
	if err := yaml.UnmarshalStrict([]byte(values), &vals); err != nil {
		t.Fatalf("values: %v", err)
	}
	install := action.NewInstall(&action.Configuration{Log: t.Logf})
	install.ClientOnly = true
	install.DryRun = true
	install.ReleaseName = "aperio"
	install.Namespace = "aperio"
	install.KubeVersion = &chartutil.KubeVersion{Version: "v1.33.0", Major: "1", Minor: "33"}
	rel, err := install.Run(ch, vals)
	if err != nil {
		return rendered{}, err
	}
	if len(rel.Hooks) != 0 {
		t.Errorf("%d hooks rendered; the chart has none", len(rel.Hooks))
	}
	objs, err := decodeAll([]byte(rel.Manifest))
	if err != nil {
		t.Fatalf("rendered manifest does not decode strictly: %v\n%s", err, rel.Manifest)
	}
	return rendered{objs: objs, notes: rel.Info.Notes}, nil
}

func mustRender(t *testing.T, values string) rendered {
	t.Helper()
	r, err := render(t, values)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	return r
}

// checkChart holds what every render must have: one server Deployment
// passing the pod checks, its Secret references resolving, and a Service
// and PDB that select exactly its pods. It returns the server container.
func checkChart(t *testing.T, r rendered, existingSecret string) (*appsv1.Deployment, corev1.Container) {
	t.Helper()
	for _, o := range r.objs {
		m, ok := o.(interface{ GetNamespace() string })
		if !ok || m.GetNamespace() != "aperio" {
			t.Errorf("%T is not in the release's namespace", o)
		}
	}
	d := one[*appsv1.Deployment](t, r.objs)
	c := checkServerPod(t, d)
	podLabels := d.Spec.Template.Labels

	// Every secretKeyRef names the chart's Secret and a key in it, or
	// the existing Secret the values name.
	secrets := find[*corev1.Secret](r.objs)
	for _, e := range c.Env {
		if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			continue
		}
		ref := e.ValueFrom.SecretKeyRef
		if existingSecret != "" {
			if ref.Name != existingSecret || len(secrets) != 0 {
				t.Errorf("%s reads Secret %q (and the chart made %d), want only the existing %q", e.Name, ref.Name, len(secrets), existingSecret)
			}
			continue
		}
		if len(secrets) != 1 || secrets[0].Name != ref.Name {
			t.Errorf("%s reads Secret %q, which the chart does not create", e.Name, ref.Name)
		} else if len(secrets[0].Data[ref.Key]) == 0 {
			t.Errorf("%s reads key %q, empty or missing in Secret %s", e.Name, ref.Key, ref.Name)
		}
	}

	svc := one[*corev1.Service](t, r.objs)
	checkService(t, svc, d, c)
	pdb := one[*policyv1.PodDisruptionBudget](t, r.objs)
	if pdb.Spec.Selector == nil || !selects(pdb.Spec.Selector.MatchLabels, podLabels) || len(pdb.Spec.Selector.MatchExpressions) != 0 {
		t.Errorf("PDB selector %v misses the server's pods %v", pdb.Spec.Selector, podLabels)
	}
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() < 1 {
		t.Errorf("PDB maxUnavailable = %v: a drain could never evict the server", pdb.Spec.MaxUnavailable)
	}
	res := c.Resources
	if res.Requests.Cpu().IsZero() || res.Requests.Memory().IsZero() || res.Limits.Memory().IsZero() {
		t.Errorf("resources = %+v, want cpu and memory requests and a memory limit", res)
	}
	if !strings.Contains(r.notes, "http://"+svc.Name+".aperio.svc.cluster.local:") {
		t.Errorf("NOTES do not give the Service's address:\n%s", r.notes)
	}
	return d, c
}

// TestChartDefaults: one replica on SQLite with a volume, a generated
// master token, a ClusterIP Service, no Ingress.
func TestChartDefaults(t *testing.T) {
	r := mustRender(t, "")
	d, c := checkChart(t, r, "")
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
		t.Errorf("replicas = %v, want 1", d.Spec.Replicas)
	}
	if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("strategy = %s, want Recreate: two pods must not share the SQLite file", d.Spec.Strategy.Type)
	}
	if _, ok := envOf(c, "APERIO_DATABASE_URL"); ok {
		t.Error("APERIO_DATABASE_URL set without a database")
	}
	pvc := one[*corev1.PersistentVolumeClaim](t, r.objs)
	var claimed string
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == "data" && v.PersistentVolumeClaim != nil {
			claimed = v.PersistentVolumeClaim.ClaimName
		}
	}
	if claimed != pvc.Name {
		t.Errorf("the data volume claims %q, want the chart's PVC %q", claimed, pvc.Name)
	}
	secret := one[*corev1.Secret](t, r.objs)
	if tok := secret.Data["server-token"]; len(tok) < 32 {
		t.Errorf("generated master token is %d bytes, want at least 32", len(tok))
	}
	if svc := one[*corev1.Service](t, r.objs); svc.Spec.Type != corev1.ServiceTypeClusterIP {
		t.Errorf("Service type = %s, want ClusterIP", svc.Spec.Type)
	}
	if n := len(find[*networkingv1.Ingress](r.objs)); n != 0 {
		t.Errorf("%d Ingresses by default, want none", n)
	}
	if strings.Contains(r.notes, "not the tunnels") {
		t.Error("NOTES warn about several servers with one replica")
	}
	if strings.Contains(r.notes, "LOST") {
		t.Error("NOTES warn of a lost store although the store has a volume")
	}
}

// TestChartHAWithDatabase: three replicas sharing PostgreSQL, the URL in
// the chart's Secret, rolling updates, no SQLite volume.
func TestChartHAWithDatabase(t *testing.T) {
	const dsn = "postgres://aperio:pw@db.example:5432/aperio?sslmode=require"
	r := mustRender(t, "replicaCount: 3\nsecret: {serverToken: master-token-for-test}\ndatabase: {url: '"+dsn+"'}\n")
	d, c := checkChart(t, r, "")
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 3 {
		t.Errorf("replicas = %v, want 3", d.Spec.Replicas)
	}
	if d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType {
		t.Errorf("strategy = %s, want RollingUpdate with a shared database", d.Spec.Strategy.Type)
	}
	db, ok := envOf(c, "APERIO_DATABASE_URL")
	if !ok {
		t.Fatal("no APERIO_DATABASE_URL with database.url set")
	}
	secret := one[*corev1.Secret](t, r.objs)
	if got := string(secret.Data[db.ValueFrom.SecretKeyRef.Key]); got != dsn {
		t.Errorf("database URL in the Secret = %q, want %q", got, dsn)
	}
	if got := string(secret.Data["server-token"]); got != "master-token-for-test" {
		t.Errorf("master token in the Secret = %q, want the one given", got)
	}
	if n := len(find[*corev1.PersistentVolumeClaim](r.objs)); n != 0 {
		t.Errorf("%d PVCs with PostgreSQL, want none", n)
	}
	for _, e := range c.Env {
		if strings.Contains(e.Value, "pw@") || strings.Contains(e.Value, "master-token") {
			t.Errorf("env %s carries a secret in plain text", e.Name)
		}
	}
	if !strings.Contains(r.notes, "share the database, not the tunnels") {
		t.Errorf("NOTES for 3 replicas do not warn that tunnels are per server:\n%s", r.notes)
	}

	// The same with an existing Secret: the chart creates none.
	r = mustRender(t, "replicaCount: 2\nsecret: {existingSecret: ops-aperio, serverTokenKey: token}\ndatabase: {existingSecretKey: dsn}\n")
	_, c = checkChart(t, r, "ops-aperio")
	db, ok = envOf(c, "APERIO_DATABASE_URL")
	if !ok || db.ValueFrom.SecretKeyRef.Key != "dsn" {
		t.Errorf("APERIO_DATABASE_URL = %+v, want key dsn of ops-aperio", db)
	}
	if tok, _ := envOf(c, "APERIO_SERVER_TOKEN"); tok.ValueFrom.SecretKeyRef.Key != "token" {
		t.Errorf("APERIO_SERVER_TOKEN reads key %q, want token", tok.ValueFrom.SecretKeyRef.Key)
	}
}

// TestChartLoadBalancerAndIngress: a LoadBalancer Service, an Ingress
// whose backend is that Service's http port, and the metrics port.
func TestChartLoadBalancerAndIngress(t *testing.T) {
	r := mustRender(t, `
service:
  type: LoadBalancer
  loadBalancerSourceRanges: [203.0.113.0/24]
ingress:
  enabled: true
  className: nginx
  hosts:
    - host: "*.apps.example.com"
      paths: [{path: /, pathType: Prefix}]
  tls:
    - secretName: apps-tls
      hosts: ["*.apps.example.com"]
metrics:
  enabled: true
`)
	_, c := checkChart(t, r, "")
	svc := one[*corev1.Service](t, r.objs)
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || len(svc.Spec.LoadBalancerSourceRanges) != 1 {
		t.Errorf("Service type %s, source ranges %v; want LoadBalancer from 203.0.113.0/24", svc.Spec.Type, svc.Spec.LoadBalancerSourceRanges)
	}
	ing := one[*networkingv1.Ingress](t, r.objs)
	if ing.Spec.IngressClassName == nil || *ing.Spec.IngressClassName != "nginx" || len(ing.Spec.TLS) != 1 {
		t.Errorf("Ingress class %v, tls %v", ing.Spec.IngressClassName, ing.Spec.TLS)
	}
	if len(ing.Spec.Rules) != 1 || ing.Spec.Rules[0].Host != "*.apps.example.com" || ing.Spec.Rules[0].HTTP == nil {
		t.Fatalf("Ingress rules = %+v", ing.Spec.Rules)
	}
	svcPorts := map[string]bool{}
	for _, p := range svc.Spec.Ports {
		svcPorts[p.Name] = true
	}
	for _, p := range ing.Spec.Rules[0].HTTP.Paths {
		b := p.Backend.Service
		if b == nil || b.Name != svc.Name || !svcPorts[b.Port.Name] || b.Port.Name != "http" {
			t.Errorf("Ingress path %s goes to %+v, want the Service's http port", p.Path, b)
		}
	}
	if !svcPorts["metrics"] {
		t.Error("metrics enabled but the Service has no metrics port")
	}
	listen, _ := envOf(c, "APERIO_METRICS_LISTEN")
	if listen.Value != "0.0.0.0:9100" {
		t.Errorf("APERIO_METRICS_LISTEN = %q, want 0.0.0.0:9100", listen.Value)
	}
	if !strings.Contains(r.notes, "https://*.apps.example.com") {
		t.Errorf("NOTES do not give the Ingress's address:\n%s", r.notes)
	}
}

// TestChartConfigEnv: env keys become APERIO_ variables, and a value
// written to break out of its YAML scalar stays one value.
func TestChartConfigEnv(t *testing.T) {
	hostile := "x\"\n- name: APERIO_SERVER_TOKEN\n  value: stolen"
	r := mustRender(t, "env:\n  log_format: json\n  scaling: true\n  outbound_allowlist: [a.example, b.example]\n  oidc.issuer: "+quoteYAML(hostile)+"\n")
	_, c := checkChart(t, r, "")
	for name, want := range map[string]string{
		"APERIO_LOG_FORMAT":         "json",
		"APERIO_SCALING":            "true",
		"APERIO_OUTBOUND_ALLOWLIST": "a.example,b.example",
		"APERIO_OIDC_ISSUER":        hostile,
	} {
		if e, _ := envOf(c, name); e.Value != want {
			t.Errorf("%s = %q, want %q", name, e.Value, want)
		}
	}
	n := 0
	for _, e := range c.Env {
		if e.Name == "APERIO_SERVER_TOKEN" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d APERIO_SERVER_TOKEN entries, want the Secret's one only", n)
	}
}

// quoteYAML writes s as a one-line YAML scalar: a JSON string is one.
func quoteYAML(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// TestChartRefusesBadValues: combinations the server cannot run with
// stop the render with a message naming the fix.
func TestChartRefusesBadValues(t *testing.T) {
	for _, tc := range []struct{ name, values, want string }{
		{"replicas without a database", "replicaCount: 3\n", "several servers need PostgreSQL: set database.url"},
		{"replicas with an existing Secret but no database key", "replicaCount: 2\nsecret: {existingSecret: s}\n", "several servers need PostgreSQL"},
		{"url beside an existing Secret", "secret: {existingSecret: s}\ndatabase: {url: 'postgres://h/db'}\n", "put the URL in that Secret"},
		{"database key without the Secret", "database: {existingSecretKey: dsn}\n", "secret.existingSecret, which is not set"},
		{"not a postgres URL", "database: {url: 'mysql://h/db'}\n", "must be a postgres://"},
		{"token through env", "env: {server.token: abc}\n", "env.server.token is set by the chart"},
		{"database through env", "env: {database_url: 'postgres://h/db'}\n", "env.database_url is set by the chart"},
		{"config file through env", "env: {server_config: /x.yaml}\n", "env.server_config is set by the chart"},
		{"metrics token in plain text", "env: {metrics_token: abc}\n", "env.metrics_token is a secret"},
		{"OIDC secret in plain text", "env: {oidc.client_secret: abc}\n", "env.oidc.client_secret is a secret"},
		{"env key that is not a setting", "env: {'Bad Key': x}\n", "is not a setting name"},
		{"token in the config file", "config: {server: {token: abc}}\n", "config.server is set by the chart"},
		{"database in the config file", "config: {database_url: 'postgres://h/db'}\n", "config.database_url is set by the chart"},
		{"port in the config file", "config: {port: 443}\n", "config.port is set by the chart"},
		{"metrics token in the config file", "config: {metrics_token: abc}\n", "config.metrics_token is a secret"},
		{"OIDC secret in the config file", "config: {oidc: {issuer: 'https://id.example.com', client_secret: abc}}\n", "config.oidc.client_secret is a secret"},
		{"metrics on the public port", "metrics: {enabled: true, port: 8080}\n", "metrics.port must differ"},
		// values.schema.json, whose errors name the value as a JSON pointer
		{"NodePort", "service: {type: NodePort}\n", "/service/type"},
		{"replicas not a number", "replicaCount: three\n", "/replicaCount"},
		{"negative replicas", "replicaCount: -1\n", "/replicaCount"},
		{"port out of range", "service: {port: 70000}\n", "/service/port"},
		{"PDB that never lets a pod go", "podDisruptionBudget: {maxUnavailable: 0}\n", "/podDisruptionBudget/maxUnavailable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render(t, tc.values)
			if err == nil {
				t.Fatalf("rendered; want an error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v\nwant it to contain %q", err, tc.want)
			}
		})
	}
}

// TestChartSecretIsEncoded checks the chart's Secret holds the given
// token once base64-decoded by the API server's rules, not twice encoded.
func TestChartSecretIsEncoded(t *testing.T) {
	r := mustRender(t, "secret: {serverToken: 'tok with spaces'}\n")
	s := one[*corev1.Secret](t, r.objs)
	if got := string(s.Data["server-token"]); got != "tok with spaces" {
		t.Errorf("server-token = %q (base64 of it: %s), want the value given", got, base64.StdEncoding.EncodeToString(s.Data["server-token"]))
	}
}

// TestChartStatefulSet: workload StatefulSet gives each server a stable
// address through a headless Service, and the NOTES list them for the
// clients' server.urls; it refuses to run without a database.
func TestChartStatefulSet(t *testing.T) {
	const dsn = "postgres://aperio:pw@db.example:5432/aperio?sslmode=require"
	r := mustRender(t, "workload: StatefulSet\nreplicaCount: 3\nsecret: {serverToken: master-token-for-test}\ndatabase: {url: '"+dsn+"'}\n")
	if n := len(find[*appsv1.Deployment](r.objs)); n != 0 {
		t.Fatalf("%d Deployments with workload StatefulSet, want none", n)
	}
	ss := one[*appsv1.StatefulSet](t, r.objs)
	if ss.Spec.Replicas == nil || *ss.Spec.Replicas != 3 {
		t.Errorf("replicas = %v, want 3", ss.Spec.Replicas)
	}
	// The pod checks are the Deployment's: same template, same selector.
	asDeployment := &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Selector: ss.Spec.Selector, Template: ss.Spec.Template}}
	c := checkServerPod(t, asDeployment)
	if _, ok := envOf(c, "APERIO_DATABASE_URL"); !ok {
		t.Error("no APERIO_DATABASE_URL in the StatefulSet's pods")
	}
	var headless, main *corev1.Service
	for _, svc := range find[*corev1.Service](r.objs) {
		if svc.Spec.ClusterIP == corev1.ClusterIPNone {
			headless = svc
		} else {
			main = svc
		}
	}
	if headless == nil || main == nil {
		t.Fatalf("want the main Service and a headless one, got headless=%v main=%v", headless != nil, main != nil)
	}
	if ss.Spec.ServiceName != headless.Name {
		t.Errorf("serviceName %q, want the headless Service %q", ss.Spec.ServiceName, headless.Name)
	}
	if !headless.Spec.PublishNotReadyAddresses {
		t.Error("the headless Service hides starting pods: a client could not dial a server until it is ready")
	}
	checkService(t, headless, asDeployment, c)
	checkService(t, main, asDeployment, c)
	if n := len(find[*corev1.PersistentVolumeClaim](r.objs)); n != 0 {
		t.Errorf("%d PVCs with PostgreSQL, want none", n)
	}
	for i := range 3 {
		url := fmt.Sprintf("http://%s-%d.%s.aperio.svc.cluster.local:8080", ss.Name, i, headless.Name)
		if !strings.Contains(r.notes, url) {
			t.Errorf("NOTES do not list server %d's address %s:\n%s", i, url, r.notes)
		}
	}
	if _, err := render(t, "workload: StatefulSet\nreplicaCount: 1\n"); err == nil || !strings.Contains(err.Error(), "StatefulSet runs servers that share PostgreSQL") {
		t.Errorf("StatefulSet without a database rendered (err %v), want the explanation", err)
	}
	if _, err := render(t, "workload: DaemonSet\n"); err == nil {
		t.Error("workload DaemonSet rendered, want the schema to refuse it")
	}
}
