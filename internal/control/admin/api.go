package admin

import (
	"context"
	"crypto/sha256"
	"errors"
	"log/slog"
	"net/http"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/aperio-dev/aperio/autoscale"
	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/control/events"
	"github.com/aperio-dev/aperio/internal/outbound"
	"github.com/aperio-dev/aperio/internal/portspec"
	"github.com/aperio-dev/aperio/internal/telemetry"
	"github.com/aperio-dev/aperio/internal/visitor/inspect"
	"github.com/aperio-dev/aperio/router"
	"github.com/aperio-dev/aperio/store"
)

// Prefix is the path under which Handler serves the API. The handler routes
// on the full request path: mount it at Prefix+"/" and do not strip the
// prefix.
const Prefix = apitype.Prefix

// MaxBodyBytes is the largest request body the API reads, in bytes. A larger
// body is answered 413.
const MaxBodyBytes = 1 << 20

// DefaultOrg is the name of the organization the master token acts in when
// a request names none. It is created on first use.
const DefaultOrg = "default"

// Store is the persistence the API needs: the subset of *store.DB it calls.
// Errors must wrap store.ErrNotFound, store.ErrConflict and
// store.ErrUnavailable as *store.DB documents.
type Store interface {
	EnsureOrg(ctx context.Context, name string) (store.Org, error)
	CreateOrg(ctx context.Context, name string) (store.Org, error)
	Org(ctx context.Context, id string) (store.Org, error)
	ListOrgs(ctx context.Context) ([]store.Org, error)
	SetOrgHostnames(ctx context.Context, orgID string, patterns []string) ([]string, error)
	ListOrgHostnames(ctx context.Context, orgID string) ([]store.OrgHostname, error)
	SetOrgPorts(ctx context.Context, orgID string, specs []string) ([]portspec.Range, error)
	ListOrgPorts(ctx context.Context, orgID string) ([]store.OrgPorts, error)

	CreateToken(ctx context.Context, t store.Token) (store.Token, error)
	Token(ctx context.Context, orgID, id string) (store.Token, error)
	ListTokens(ctx context.Context, orgID string) ([]store.Token, error)
	RevokeToken(ctx context.Context, orgID, id string, at time.Time) (store.Token, error)
	UpdateToken(ctx context.Context, orgID, id string, e store.TokenEdit) (store.Token, error)
	RotateToken(ctx context.Context, orgID, id string, hash []byte, prefix string, graceEnds time.Time) (store.Token, error)
	SetOrgLimits(ctx context.Context, id string, l store.OrgLimits) (store.Org, error)

	CreateAdminKey(ctx context.Context, k store.AdminKey) (store.AdminKey, error)
	AdminKeyByHash(ctx context.Context, hash []byte) (store.AdminKey, error)
	ListAdminKeys(ctx context.Context, orgID string) ([]store.AdminKey, error)
	DeleteAdminKey(ctx context.Context, orgID, id string) error
	AdminKey(ctx context.Context, orgID, id string) (store.AdminKey, error)
	ReleaseScalingArmer(ctx context.Context, armer string) ([]string, error)

	CreateAdminSession(ctx context.Context, s store.AdminSession, keep int) (store.AdminSession, error)
	AdminSessionByHash(ctx context.Context, hash []byte) (store.AdminSession, error)
	DeleteAdminSession(ctx context.Context, hash []byte) error
	DeleteExpiredAdminSessions(ctx context.Context, now time.Time) (int64, error)

	SetMaintenance(ctx context.Context, m store.Maintenance) error
	ClearMaintenance(ctx context.Context, orgID, hostname string) error
	ListMaintenance(ctx context.Context) ([]store.Maintenance, error)

	CreateWebhook(ctx context.Context, w store.Webhook) (store.Webhook, error)
	ListWebhooks(ctx context.Context, orgID string) ([]store.Webhook, error)
	DeleteWebhook(ctx context.Context, orgID, id string) error
	ListWebhookDeliveries(ctx context.Context, orgID, webhookID string, limit int) ([]store.WebhookDelivery, error)
	WebhookDelivery(ctx context.Context, orgID, webhookID, id string) (store.WebhookDelivery, error)

	AppendAudit(ctx context.Context, e store.AuditEntry) (store.AuditEntry, error)
	RevokeOIDCSessions(ctx context.Context, r store.OIDCRevocation) (store.OIDCRevocation, error)
	ListAudit(ctx context.Context, orgID string, limit int) ([]store.AuditEntry, error)
	QueryAudit(ctx context.Context, q store.AuditQuery) ([]store.AuditEntry, error)
	VerifyAudit(ctx context.Context) (int64, error)

	QueryUsage(ctx context.Context, q store.UsageQuery) ([]store.UsageRow, error)
}

// ClientLister reports the clients connected to this server, for GET
// /clients. Clients is called once per request, from the request's
// goroutine, and must be safe for concurrent use; the API neither keeps nor
// modifies the slice.
type ClientLister interface {
	Clients() []ClientInfo
}

// PortLister lists the public TCP and UDP ports open on the server.
type PortLister interface {
	Ports() []PortInfo
	// Explain reports the open port num/proto and its entries admitting
	// ip (every entry when ip is not valid); ok is false when it is not
	// open. enabled is false when the server has no tcp_port_range.
	Explain(num int, proto string, ip netip.Addr) (p PortInfo, admitting []string, ok, enabled bool)
}

// PortInfo is one public port as GET /ports shows it.
type PortInfo = apitype.PortInfo

// PortExplanation is GET /ports/explain's answer.
type PortExplanation = apitype.PortExplanation

// ClientInfo is one connected client as GET /clients shows it: one entry per
// client connection and service.
type ClientInfo = apitype.ClientInfo

// Concurrency is a service's concurrency limiter in GET /clients.
type Concurrency = apitype.Concurrency

// Scaling is the autoscaler as the API needs it: the subset of
// *autoscale.Controller that GET /scaling, POST /scaling, GET
// /scaling/{id} and DELETE /scaling/{id} call. Every method is called from request goroutines and
// must be safe for concurrent use.
//
// List returns the records of orgID ("" means every organization) with
// their live pool. Arm creates or updates and re-arms the record of an
// operator's declaration (autoscale.Controller.Arm): its errors wrap
// autoscale.ErrInvalid (a *autoscale.DeclarationError), ErrBindTaken or
// ErrRecordLimit when the declaration is refused; the record it stored
// must reach every server sharing the store (the store's change feed).
// Disarm removes record id of orgID; its error wraps autoscale.ErrNoRecord
// or store.ErrNotFound when there is no such record.
// Errors that wrap store.ErrUnavailable answer 503, as for Store. History
// returns what the server remembers of record id (its latest decisions and
// pool samples), without I/O; the API asks only for a record List showed
// the caller.
type Scaling interface {
	List(ctx context.Context, orgID string) ([]autoscale.View, error)
	Arm(ctx context.Context, d autoscale.OperatorDeclaration) (v autoscale.View, created bool, err error)
	Disarm(ctx context.Context, orgID, id string) error
	History(id string) autoscale.History
}

// URLChecker judges an outbound URL without calling it: the static checks
// of the server's outbound policy (*outbound.Client.CheckURL). CheckURL must
// be safe for concurrent use and do no I/O; its refusal is a
// *outbound.RefusedError, whose Reason the API quotes.
type URLChecker interface {
	CheckURL(raw string) error
}

// WebhookSender sends one delivery to one subscription now, for POST
// /webhooks/{id}/test and …/redeliver: *webhook.Dispatcher. Both block
// for one attempt (bounded by outbound.Timeout), record it in the delivery
// log, and return the delivery with the receiver's answer; they must be
// safe for concurrent use. Redeliver's error wraps webhook.ErrNoBody when
// the log kept no body.
type WebhookSender interface {
	Test(ctx context.Context, sub store.Webhook) (store.WebhookDelivery, error)
	Redeliver(ctx context.Context, sub store.Webhook, prev store.WebhookDelivery) (store.WebhookDelivery, error)
}

// Explainer explains what the server would do with a request nobody sends,
// for GET /explain: *router.Router. Explain is called from request
// goroutines, must be safe for concurrent use and must change nothing.
type Explainer interface {
	Explain(ctx context.Context, host, path string, ip netip.Addr) router.Explanation
}

// Config is what New needs.
type Config struct {
	// MasterToken is server.token: it may do everything, in every
	// organization, and alone may create organizations. Required.
	MasterToken string
	// Store persists organizations, tokens, admin keys, maintenance and the
	// audit log. Required.
	Store Store
	// Clients lists the connected clients. Nil means none: GET /clients
	// answers an empty list.
	Clients ClientLister
	// Ports lists the public ports (tcp_port_range). Nil means none:
	// GET /ports answers an empty list.
	Ports PortLister
	// TCPPortRange is the server's tcp_port_range: a token's
	// allow_tcp_ports must lie inside it (400 otherwise). Empty means the
	// server opens no public port, and a token may name none.
	TCPPortRange []portspec.Range
	// Disabler disables and enables connected clients (the kill switch).
	// Nil means none can be: POST /clients/{id}/disable and /enable
	// answer 404.
	Disabler ClientDisabler
	// Drainer asks connected clients to retire. Nil means none can be:
	// POST /clients/{id}/drain answers 404.
	Drainer ClientDrainer
	// Scaling lists and disarms scaling records. Nil means autoscaling is
	// off: GET /scaling answers an empty list and DELETE /scaling/{id}
	// answers 404. It must be nil itself then, not an interface holding a
	// nil *autoscale.Controller.
	Scaling Scaling
	// Outbound checks webhook URLs when they are created, with the same
	// policy (scaling_allow_http, scaling_allow_private,
	// outbound_allowlist, outbound_block_private) as the deliveries, which
	// check again at dial time. Nil means the strictest policy: https to
	// public destinations only.
	Outbound URLChecker
	// Explainer answers GET /explain. Nil means this server has no router
	// to ask: GET /explain answers 404.
	Explainer Explainer
	// Shares mints share links for POST /share. Nil means share links are
	// off on this server: POST /share answers 404.
	Shares ShareMinter
	// OIDC is the admin login through the server's OpenID Connect
	// provider (admin_oidc): LoginHandler, the callback and sessions in
	// place of a bearer credential. Nil means off.
	OIDC *OIDCConfig
	// Inspector holds the request inspector's captures: the routes under
	// /inspect. Nil means the inspector is off: they answer 404.
	Inspector *inspect.Inspector
	// Replay is the server's pipeline (the observed router) through which
	// POST /inspect/{hostname}/requests/{id}/replay sends a captured
	// request again. Nil means replay is off: that route answers 404.
	Replay http.Handler
	// KeySessionTTL is the lifetime of a key session (KeySessionPath),
	// from its login, whatever the browser keeps. Zero means SessionTTL;
	// negative is invalid.
	KeySessionTTL time.Duration
	// Events receives the events the API emits (token_created,
	// token_revoked, token_rotated, maintenance_on, maintenance_off), each
	// after its audit entry, for webhook delivery (*webhook.Dispatcher).
	// Nil delivers none; the audit entries are written all the same.
	Events events.Sink
	// Subscriptions is told when an organization's webhooks are created
	// or deleted, so that deliveries use them at once
	// (*webhook.Dispatcher). Nil means no cache to invalidate.
	Subscriptions SubscriptionCache
	// Revocations is told, before POST /oidc/sessions/revoke answers,
	// that a hostname's OIDC session revocations changed, so that this
	// server refuses the sessions from the answer on; the other servers
	// follow through the store's change feed. Nil means this server
	// holds no revocations of its own.
	Revocations RevocationFollower
	// Webhooks sends test deliveries and redeliveries
	// (*webhook.Dispatcher). Nil means this server sends none: POST
	// /webhooks/{id}/test and …/redeliver answer 404.
	Webhooks WebhookSender
	// Traffic answers GET /stats. Nil means no figures: the answer counts
	// the clients but no request.
	Traffic Traffic
	// Stream is the live stream GET /stream follows. Nil means it is off:
	// GET /stream answers 404.
	Stream Stream
	// StreamHeartbeat is the interval of the stream's comment lines; zero
	// means DefaultStreamHeartbeat.
	StreamHeartbeat time.Duration
	// StreamWriteTimeout bounds each write to a stream subscriber: one
	// that does not read for that long is dropped. Zero means
	// telemetry.StreamWriteTimeout.
	StreamWriteTimeout time.Duration
	// Logger receives store outages, internal errors and suppressed
	// failed-login audits. Nil discards. Secrets are never logged.
	Logger *slog.Logger
	// Now is the clock used for token expiry, revocation and maintenance
	// times, key sessions' expiry and the failed-login budget. Nil means
	// time.Now.
	Now func() time.Time
}

// Validate reports every problem with cfg, joined.
func (cfg Config) Validate() error {
	var errs []error
	if cfg.MasterToken == "" {
		errs = append(errs, errors.New("admin: no master token"))
	}
	if cfg.Store == nil {
		errs = append(errs, errors.New("admin: no store"))
	}
	if cfg.OIDC != nil {
		errs = append(errs, cfg.OIDC.validate())
	}
	if cfg.KeySessionTTL < 0 {
		errs = append(errs, errors.New("admin: negative key session lifetime"))
	}
	return errors.Join(errs...)
}

func (cfg Config) withDefaults() Config {
	if cfg.Outbound == nil {
		fc, err := outbound.New(outbound.Policy{})
		if err != nil {
			panic("admin: the zero outbound policy is invalid: " + err.Error()) // impossible: it has no allowlist
		}
		cfg.Outbound = fc
	}
	if cfg.Clients == nil {
		cfg.Clients = noClients{}
	}
	if cfg.Subscriptions == nil {
		cfg.Subscriptions = noSubscriptionCache{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.KeySessionTTL == 0 {
		cfg.KeySessionTTL = SessionTTL
	}
	if cfg.StreamHeartbeat <= 0 {
		cfg.StreamHeartbeat = DefaultStreamHeartbeat
	}
	if cfg.StreamWriteTimeout <= 0 {
		cfg.StreamWriteTimeout = telemetry.StreamWriteTimeout
	}
	return cfg
}

type noClients struct{}

// SubscriptionCache caches webhook subscriptions. Invalidate forgets
// orgID's; it must not block and must be safe for concurrent use.
type SubscriptionCache interface {
	Invalidate(orgID string)
}

// RevocationFollower loads a hostname's OIDC session revocations from
// the store into what the server's logins check; an error means they are
// not in force here yet.
type RevocationFollower interface {
	ReloadRevocations(ctx context.Context, hostname string) error
}

type noSubscriptionCache struct{}

func (noSubscriptionCache) Invalidate(string) {}

func (noClients) Clients() []ClientInfo { return nil }

// API is the admin API. It is safe for concurrent use; it owns no goroutine
// and needs no closing (the store belongs to the caller).
type API struct {
	store    Store
	clients  ClientLister
	ports    PortLister
	tcpRange []portspec.Range // tcp_port_range
	// disabler is the kill switch; nil when there is none.
	disabler ClientDisabler
	scaling  Scaling // nil when autoscaling is off
	fence    URLChecker
	explain  Explainer
	shares   ShareMinter // nil when share links are off
	// emitter appends the audit entry of each event webhooks may
	// receive and hands the event on to Config.Events.
	emitter  *events.Emitter
	subs     SubscriptionCache
	revs     RevocationFollower
	webhooks WebhookSender // nil when test and redeliver are off
	traffic  Traffic       // nil when there are no figures
	stream   Stream        // nil when the live stream is off
	drainer  ClientDrainer // nil when clients cannot be asked to retire
	// heartbeat and streamWrite are the stream's comment interval and
	// write deadline.
	heartbeat, streamWrite time.Duration
	log                    *slog.Logger
	now                    func() time.Time
	master                 [sha256.Size]byte // SHA-256 of the master token, compared in constant time
	logins                 loginBudget
	login                  *adminLogin            // the admin login; nil when admin_oidc is off
	defOrg                 atomic.Pointer[string] // ID of DefaultOrg once seen: see defaultOrgID
	router                 *chi.Mux
	inspect                *inspect.Inspector // nil when the inspector is off
	replay                 http.Handler       // nil when replay is off
	keyTTL                 time.Duration      // lifetime of a key session
}

// New returns the admin API cfg describes, or the problems of cfg.
func New(cfg Config) (*API, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	a := &API{
		store:    cfg.Store,
		clients:  cfg.Clients,
		ports:    cfg.Ports,
		tcpRange: cfg.TCPPortRange,
		disabler: cfg.Disabler,
		drainer:  cfg.Drainer,
		scaling:  cfg.Scaling,
		fence:    cfg.Outbound,
		explain:  cfg.Explainer,
		shares:   cfg.Shares,
		emitter: events.New(events.Config{
			Audit: cfg.Store, Sink: cfg.Events, Logger: cfg.Logger, Now: cfg.Now, AuditTimeout: auditTimeout,
		}),
		subs:        cfg.Subscriptions,
		revs:        cfg.Revocations,
		webhooks:    cfg.Webhooks,
		traffic:     cfg.Traffic,
		stream:      cfg.Stream,
		log:         cfg.Logger,
		heartbeat:   cfg.StreamHeartbeat,
		streamWrite: cfg.StreamWriteTimeout,
		now:         cfg.Now,
		master:      sha256.Sum256([]byte(cfg.MasterToken)),
		inspect:     cfg.Inspector,
		replay:      cfg.Replay,
		keyTTL:      cfg.KeySessionTTL,
	}
	if cfg.OIDC != nil {
		l, err := newAdminLogin(cfg.OIDC, cfg.MasterToken, cfg.Now)
		if err != nil {
			return nil, err
		}
		a.login = l
	}
	a.router = a.routes()
	return a, nil
}

// Handler returns the handler of every route under Prefix. It routes on the
// full request path, whatever router it is mounted in: serve it for
// Prefix+"/" without stripping the prefix.
func (a *API) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A chi router higher up leaves its routing context in the request;
		// clearing it makes this router match r.URL.Path from the root.
		ctx := context.WithValue(r.Context(), chi.RouteCtxKey, nil)
		a.router.ServeHTTP(w, r.WithContext(ctx))
	})
}

// route is one endpoint: who may call it and what it does.
type route struct {
	method  string
	pattern string // relative to Prefix
	min     role
	h       handlerFunc
}

// routeTable lists every endpoint. The OpenAPI document must describe
// exactly these, with the same minimum role (see openapi_test.go).
func (a *API) routeTable() []route {
	return []route{
		{http.MethodGet, "/orgs", roleViewer, a.listOrgs},
		{http.MethodPost, "/orgs", roleMaster, a.createOrg},
		{http.MethodGet, "/orgs/{id}/hostnames", roleViewer, a.getOrgHostnames},
		{http.MethodPut, "/orgs/{id}/hostnames", roleMaster, a.setOrgHostnames},
		{http.MethodGet, "/orgs/{id}/ports", roleViewer, a.getOrgPorts},
		{http.MethodPut, "/orgs/{id}/ports", roleMaster, a.setOrgPorts},
		{http.MethodPatch, "/orgs/{id}", roleMaster, a.updateOrg},
		{http.MethodGet, "/admin-keys", roleViewer, a.listKeys},
		{http.MethodPost, "/admin-keys", roleAdmin, a.createKey},
		{http.MethodDelete, "/admin-keys/{id}", roleAdmin, a.deleteKey},
		{http.MethodGet, "/tokens", roleViewer, a.listTokens},
		{http.MethodPost, "/tokens", roleAdmin, a.createToken},
		{http.MethodDelete, "/tokens/{id}", roleAdmin, a.revokeToken},
		{http.MethodPatch, "/tokens/{id}", roleAdmin, a.updateToken},
		{http.MethodPost, "/tokens/{id}/rotate", roleAdmin, a.rotateToken},
		{http.MethodGet, "/clients", roleViewer, a.listClients},
		{http.MethodGet, "/ports", roleViewer, a.listPorts},
		{http.MethodGet, "/ports/explain", roleViewer, a.explainPort},
		{http.MethodPost, "/clients/{id}/disable", roleOperator, a.disableClient},
		{http.MethodPost, "/clients/{id}/enable", roleOperator, a.enableClient},
		{http.MethodPost, "/clients/{id}/drain", roleOperator, a.drainClient},
		{http.MethodGet, "/scaling", roleViewer, a.listScaling},
		{http.MethodPost, "/scaling", roleAdmin, a.createScaling},
		{http.MethodGet, "/scaling/{id}", roleViewer, a.getScaling},
		{http.MethodDelete, "/scaling/{id}", roleOperator, a.disarmScaling},
		{http.MethodGet, "/webhooks", roleViewer, a.listWebhooks},
		{http.MethodPost, "/webhooks", roleAdmin, a.createWebhook},
		{http.MethodDelete, "/webhooks/{id}", roleAdmin, a.deleteWebhook},
		{http.MethodGet, "/webhooks/{id}/deliveries", roleViewer, a.listWebhookDeliveries},
		{http.MethodPost, "/webhooks/{id}/test", roleAdmin, a.testWebhook},
		{http.MethodPost, "/webhooks/{id}/deliveries/{delivery_id}/redeliver", roleAdmin, a.redeliverWebhook},
		{http.MethodGet, "/maintenance", roleViewer, a.listMaintenance},
		{http.MethodPut, "/maintenance/{hostname}", roleOperator, a.setMaintenance},
		{http.MethodDelete, "/maintenance/{hostname}", roleOperator, a.clearMaintenance},
		{http.MethodPost, "/oidc/sessions/revoke", roleOperator, a.revokeOIDCSessions},
		{http.MethodPost, "/share", roleOperator, a.createShare},
		{http.MethodPost, "/share/keys/rotate", roleAdmin, a.rotateShareKey},
		{http.MethodGet, "/inspect", roleViewer, a.listInspect},
		{http.MethodPut, "/inspect/{hostname}", roleOperator, a.startInspect},
		{http.MethodDelete, "/inspect/{hostname}", roleOperator, a.stopInspect},
		{http.MethodGet, "/inspect/{hostname}/requests", roleViewer, a.listInspectRequests},
		{http.MethodGet, "/inspect/{hostname}/requests/{id}", roleViewer, a.getInspectRequest},
		{http.MethodPost, "/inspect/{hostname}/requests/{id}/replay", roleOperator, a.replayInspectRequest},
		{http.MethodGet, "/audit", roleViewer, a.listAudit},
		{http.MethodGet, "/audit/verify", roleAdmin, a.verifyAudit},
		{http.MethodGet, "/usage", roleViewer, a.listUsage},
		{http.MethodGet, "/stats", roleViewer, a.stats},
		{http.MethodGet, "/stream", roleViewer, a.streamEvents},
		{http.MethodGet, "/explain", roleViewer, a.explainRequest},
		{http.MethodGet, "/whoami", roleViewer, a.whoami},
		{http.MethodGet, "/openapi.json", roleNone, a.openAPI},
	}
}

func (a *API) routes() *chi.Mux {
	r := chi.NewRouter()
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		a.fail(w, r, errorf(http.StatusNotFound, "no such endpoint: %s %s", r.Method, r.URL.Path))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		a.fail(w, r, errorf(http.StatusMethodNotAllowed, "method %s is not allowed on %s", r.Method, r.URL.Path))
	})
	r.Route(Prefix, func(r chi.Router) {
		for _, rt := range a.routeTable() {
			r.Method(rt.method, rt.pattern, a.serve(rt))
		}
	})
	return r
}

// serve wraps h with authentication, the role check and the translation of
// its error into a response.
func (a *API) serve(rt route) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var c caller
		var err error
		if rt.min != roleNone {
			c, err = a.authenticate(r)
			if err == nil {
				err = c.allow(rt.min)
			}
			if err == nil {
				err = checkCSRF(r, c)
			}
		}
		if err == nil {
			err = rt.h(w, r, c)
		}
		if err != nil {
			a.fail(w, r, err)
		}
	}
}
