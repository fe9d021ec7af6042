package admin_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/aperio-dev/aperio/internal/control/admin"
)

func TestNewValidates(t *testing.T) {
	tests := []struct {
		name string
		cfg  admin.Config
		want []string
	}{
		{"empty", admin.Config{}, []string{"admin: no master token", "admin: no store"}},
		{"no store", admin.Config{MasterToken: "m"}, []string{"admin: no store"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := admin.New(tt.cfg)
			if err == nil {
				t.Fatalf("New(%+v) = nil error, want %q", tt.cfg, tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("New(%+v) = %q, want it to contain %q", tt.cfg, err, w)
				}
			}
		})
	}
}

func TestAuthentication(t *testing.T) {
	f := newFixture(t)
	viewer := f.key(t, "", admin.RoleViewer)
	tests := []struct {
		name   string
		header string // Authorization; "" sends none
		want   int
	}{
		{"no header", "", http.StatusUnauthorized},
		{"basic scheme", "Basic " + base64.StdEncoding.EncodeToString([]byte("a:b")), http.StatusUnauthorized},
		{"empty bearer", "Bearer ", http.StatusUnauthorized},
		{"wrong master", "Bearer " + masterToken + "x", http.StatusUnauthorized},
		{"master prefix", "Bearer " + masterToken[:5], http.StatusUnauthorized},
		{"unknown key", "Bearer apk_" + strings.Repeat("a", 52), http.StatusUnauthorized},
		{"key with a character changed", "Bearer " + viewer.Secret[:len(viewer.Secret)-1] + "!", http.StatusUnauthorized},
		{"master", "Bearer " + masterToken, http.StatusOK},
		{"lowercase scheme", "bearer " + masterToken, http.StatusOK},
		{"viewer key", "Bearer " + viewer.Secret, http.StatusOK},
	}
	failures := 0
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest("GET", f.url+admin.Prefix+"/tokens", nil)
			if err != nil {
				t.Fatal(err)
			}
			if tt.header != "" {
				req.Header.Set("Authorization", tt.header)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Fatalf("GET /tokens with %q = %d, want %d", tt.header, resp.StatusCode, tt.want)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q, want application/json", ct)
			}
			if tt.want != http.StatusUnauthorized {
				return
			}
			failures++
			var eb struct{ Error string }
			if err := json.NewDecoder(resp.Body).Decode(&eb); err != nil || eb.Error == "" {
				t.Errorf("401 body: error %q, %v; want a JSON error", eb.Error, err)
			}
			if got := resp.Header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer") {
				t.Errorf("WWW-Authenticate = %q, want Bearer", got)
			}
		})
	}
	var logins []admin.AuditEntry
	for _, e := range f.audit(t) {
		if e.Event == admin.EventLoginFailed {
			logins = append(logins, e)
		}
	}
	if len(logins) != failures {
		t.Fatalf("login_failed entries = %d, want %d", len(logins), failures)
	}
	for _, e := range logins {
		if e.Actor != "anonymous" || e.OrgID != "" || !strings.Contains(e.Detail, "127.0.0.1") {
			t.Errorf("login_failed entry = %+v, want actor anonymous, no org, the remote address", e)
		}
		if strings.Contains(e.Detail, masterToken) {
			t.Errorf("login_failed entry %+v holds the master token", e)
		}
	}
}

func TestFailedLoginAuditIsBounded(t *testing.T) {
	f := newFixture(t)
	const tries = 75
	for range tries {
		f.expectError(t, "GET", "/tokens", "nope", "", http.StatusUnauthorized, "invalid credentials")
	}
	count := func() int {
		n := 0
		for _, e := range f.audit(t) {
			if e.Event == admin.EventLoginFailed {
				n++
			}
		}
		return n
	}
	if got := count(); got != 60 {
		t.Fatalf("login_failed entries after %d failures in a minute = %d, want 60", tries, got)
	}
	if !strings.Contains(f.logs.String(), "failed logins over budget") {
		t.Errorf("log = %q, want a line about the budget", f.logs.String())
	}
	f.clock.Advance(time.Minute)
	f.expectError(t, "GET", "/tokens", "nope", "", http.StatusUnauthorized, "invalid credentials")
	if got := count(); got != 61 {
		t.Fatalf("login_failed entries a minute later = %d, want 61", got)
	}
	if e := f.audit(t)[0]; !strings.Contains(e.Detail, fmt.Sprintf("%d earlier failed logins", tries-60)) {
		t.Errorf("first entry of the next minute = %+v, want it to count the %d not audited", e, tries-60)
	}
}

func TestRoles(t *testing.T) {
	f := newFixture(t)
	keys := map[string]string{"master": masterToken}
	for _, r := range admin.Roles() {
		keys[r] = f.key(t, "", r).Secret
	}
	tests := []struct {
		method, path, body string
		ok                 int
		allowed            []string // who gets ok; everyone else 403
	}{
		{"GET", "/tokens", "", 200, []string{"viewer", "operator", "admin", "master"}},
		{"GET", "/admin-keys", "", 200, []string{"viewer", "operator", "admin", "master"}},
		{"GET", "/clients", "", 200, []string{"viewer", "operator", "admin", "master"}},
		{"GET", "/scaling", "", 200, []string{"viewer", "operator", "admin", "master"}},
		{"GET", "/maintenance", "", 200, []string{"viewer", "operator", "admin", "master"}},
		{"GET", "/audit", "", 200, []string{"viewer", "operator", "admin", "master"}},
		{"GET", "/orgs", "", 200, []string{"viewer", "operator", "admin", "master"}},
		{"PUT", "/maintenance/app.example.com", "", 204, []string{"operator", "admin", "master"}},
		{"DELETE", "/maintenance/app.example.com", "", 204, []string{"operator", "admin", "master"}},
		{"POST", "/tokens", `{"name":"t","hostnames":["a.example.com"]}`, 201, []string{"admin", "master"}},
		{"POST", "/admin-keys", `{"name":"k","role":"viewer"}`, 201, []string{"admin", "master"}},
		{"POST", "/orgs", `{"name":"org-%s"}`, 201, []string{"master"}},
	}
	for _, tt := range tests {
		for _, who := range []string{"viewer", "operator", "admin", "master"} {
			t.Run(tt.method+" "+tt.path+" as "+who, func(t *testing.T) {
				body := tt.body
				if strings.Contains(body, "%s") {
					body = fmt.Sprintf(body, who)
				}
				if slices.Contains(tt.allowed, who) {
					if tt.method == "DELETE" { // something to turn off
						f.expect(t, "PUT", tt.path, masterToken, "", http.StatusNoContent, nil)
					}
					f.expect(t, tt.method, tt.path, keys[who], body, tt.ok, nil)
					return
				}
				f.expectError(t, tt.method, tt.path, keys[who], body, http.StatusForbidden, "do this")
			})
		}
	}
}

func TestCreateToken(t *testing.T) {
	f := newFixture(t)
	expires := f.clock.Now().Add(24 * time.Hour).Truncate(time.Second)
	body := fmt.Sprintf(`{"name":" ci ","hostnames":["App.Example.com","*.svc.example.com","app.example.com"],
		"allowed_ips":["10.0.0.0/8","192.0.2.7","2001:db8::1","::ffff:198.51.100.1"],"expires_at":%q}`,
		expires.Format(time.RFC3339))
	var got admin.MintedToken
	f.expect(t, "POST", "/tokens", masterToken, body, http.StatusCreated, &got)

	var orgs []admin.Org
	f.expect(t, "GET", "/orgs", masterToken, "", http.StatusOK, &orgs)
	if len(orgs) != 1 || orgs[0].Name != admin.DefaultOrg {
		t.Fatalf("orgs = %+v, want the default organization alone", orgs)
	}
	if !strings.HasPrefix(got.Secret, "apr_") || len(got.Secret) != 56 {
		t.Errorf("token = %q, want apr_ and 52 base32 characters", got.Secret)
	}
	checks := []struct {
		what      string
		got, want any
	}{
		{"name", got.Name, "ci"},
		{"prefix", got.Prefix, got.Secret[:8]},
		{"org_id", got.OrgID, orgs[0].ID},
		{"hostnames", strings.Join(got.Hostnames, " "), "app.example.com *.svc.example.com"},
		{"allowed_ips", strings.Join(got.AllowedIPs, " "), "10.0.0.0/8 192.0.2.7/32 2001:db8::1/128 198.51.100.1/32"},
		{"expires_at", got.ExpiresAt != nil && got.ExpiresAt.Equal(expires), true},
		{"revoked_at", got.RevokedAt == nil, true},
		{"status", got.Status, admin.TokenActive},
		{"created_by", got.CreatedBy, "master"},
		{"id", strings.HasPrefix(got.ID, "tok_"), true},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("POST /tokens: %s = %v, want %v", c.what, c.got, c.want)
		}
	}
	// The secret is what the store knows the token by.
	sum := sha256.Sum256([]byte(got.Secret))
	st, err := f.db.TokenByHash(context.Background(), sum[:])
	if err != nil || st.ID != got.ID {
		t.Errorf("TokenByHash(sha256(token)) = %+v, %v, want token %s", st, err, got.ID)
	}
	two := f.token(t, masterToken, "two.example.com")
	if two.Secret == got.Secret {
		t.Errorf("two tokens share the secret %q", two.Secret)
	}
	var list []admin.Token
	f.expect(t, "GET", "/tokens", masterToken, "", http.StatusOK, &list)
	if len(list) != 2 || list[0].ID != two.ID || list[1].ID != got.ID {
		t.Errorf("GET /tokens = %+v, want %s then %s (newest first)", list, two.ID, got.ID)
	}
}

func TestCreateTokenRefusesBadInput(t *testing.T) {
	f := newFixture(t)
	key := f.key(t, "", admin.RoleAdmin).Secret
	past := f.clock.Now().Add(-time.Minute).Format(time.RFC3339)
	tests := []struct {
		name   string
		cred   string
		body   string
		status int
		msg    string
	}{
		{"empty body", masterToken, "", 400, "request body is empty"},
		{"malformed JSON", masterToken, `{"name": "x",`, 400, "malformed JSON"},
		{"trailing garbage", masterToken, `{"name":"x"} x`, 400, "malformed JSON"},
		{"array", masterToken, `["x"]`, 400, "expected a JSON object, got array"},
		{"null", masterToken, `null`, 400, "expected a JSON object, got null"},
		{"unknown field", masterToken, `{"name":"x","hostnames":["a.example.com"],"hostname":"b"}`, 400, `unknown field "hostname"`},
		{"field in another case", masterToken, `{"Name":"x","hostnames":["a.example.com"]}`, 400, `unknown field "Name"`},
		{"name a number", masterToken, `{"name":5,"hostnames":["a.example.com"]}`, 400, `field "name": expected a string, got number`},
		{"hostnames a string", masterToken, `{"name":"x","hostnames":"a.example.com"}`, 400, `field "hostnames": expected an array of strings, got string`},
		{"expires_at a number", masterToken, `{"name":"x","hostnames":["a.example.com"],"expires_at":5}`, 400, `field "expires_at": expected a string`},
		{"no name", masterToken, `{"hostnames":["a.example.com"]}`, 400, "name is required"},
		{"no hostnames", masterToken, `{"name":"x","hostnames":[]}`, 400, "at least one hostname"},
		{"invalid hostname", masterToken, `{"name":"x","hostnames":["a.example.com","bad_host!.com"]}`, 400, `hostnames[1]: invalid hostname "bad_host!.com"`},
		{"ip as hostname", masterToken, `{"name":"x","hostnames":["10.0.0.1"]}`, 400, "hostnames[0]"},
		{"invalid CIDR", masterToken, `{"name":"x","hostnames":["a.example.com"],"allowed_ips":["10.0.0.0/33"]}`, 400, `allowed_ips[0]: "10.0.0.0/33" is not a valid CIDR`},
		{"not an address", masterToken, `{"name":"x","hostnames":["a.example.com"],"allowed_ips":["example.com"]}`, 400, `allowed_ips[0]: "example.com" is not a valid IP address`},
		{"host bits set", masterToken, `{"name":"x","hostnames":["a.example.com"],"allowed_ips":["10.1.2.3/8"]}`, 400, "did you mean 10.0.0.0/8?"},
		{"expires_at in the past", masterToken, fmt.Sprintf(`{"name":"x","hostnames":["a.example.com"],"expires_at":%q}`, past), 400, "is not in the future"},
		{"expires_at not RFC 3339", masterToken, `{"name":"x","hostnames":["a.example.com"],"expires_at":"tomorrow"}`, 400, "not an RFC 3339 time"},
		{"every problem at once", masterToken, `{"name":"","hostnames":["-x"],"allowed_ips":["y"]}`, 400, "name is required; hostnames[0]"},
		{"org_id from a key", key, `{"name":"x","hostnames":["a.example.com"],"org_id":"org_x"}`, 400, "org_id may only be set with the master token"},
		{"unknown org", masterToken, `{"name":"x","hostnames":["a.example.com"],"org_id":"org_x"}`, 404, `organization "org_x" not found`},
		{"body too large", masterToken, `{"name":"` + strings.Repeat("x", admin.MaxBodyBytes) + `"}`, 413, "larger than 1048576 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.expectError(t, "POST", "/tokens", tt.cred, tt.body, tt.status, tt.msg)
		})
	}
	var list []admin.Token
	f.expect(t, "GET", "/tokens", masterToken, "", http.StatusOK, &list)
	if len(list) != 0 {
		t.Errorf("GET /tokens after bad requests = %+v, want none", list)
	}
}

func TestTokenStatusAndRevoke(t *testing.T) {
	f := newFixture(t)
	expires := f.clock.Now().Add(time.Hour).Format(time.RFC3339)
	var soon admin.MintedToken
	f.expect(t, "POST", "/tokens", masterToken,
		fmt.Sprintf(`{"name":"soon","hostnames":["soon.example.com"],"expires_at":%q}`, expires), http.StatusCreated, &soon)
	revoked := f.token(t, masterToken, "revoked.example.com")
	active := f.token(t, masterToken, "active.example.com")

	var first, again admin.Token
	f.expect(t, "DELETE", "/tokens/"+revoked.ID, masterToken, "", http.StatusOK, &first)
	if first.Status != admin.TokenRevoked || first.RevokedAt == nil {
		t.Fatalf("DELETE /tokens/%s = %+v, want status revoked with revoked_at", revoked.ID, first)
	}
	f.expect(t, "DELETE", "/tokens/"+revoked.ID, masterToken, "", http.StatusOK, &again)
	if again.RevokedAt == nil || !again.RevokedAt.Equal(*first.RevokedAt) {
		t.Errorf("second revoke revoked_at = %v, want the first's %v", again.RevokedAt, first.RevokedAt)
	}
	f.expectError(t, "DELETE", "/tokens/tok_nope", masterToken, "", http.StatusNotFound, `token "tok_nope" not found`)

	f.clock.Advance(2 * time.Hour)
	var list []admin.Token
	f.expect(t, "GET", "/tokens", masterToken, "", http.StatusOK, &list)
	want := map[string]string{soon.ID: admin.TokenExpired, revoked.ID: admin.TokenRevoked, active.ID: admin.TokenActive}
	for _, tok := range list {
		if tok.Status != want[tok.ID] {
			t.Errorf("status of %s = %q, want %q", tok.Name, tok.Status, want[tok.ID])
		}
	}
	n := 0
	for _, e := range f.audit(t) {
		if e.Event == admin.EventTokenRevoked {
			n++
		}
	}
	if n != 1 {
		t.Errorf("token_revoked entries after two revokes of one token = %d, want 1", n)
	}
}

func TestAdminKeys(t *testing.T) {
	f := newFixture(t)
	admin1 := f.key(t, "", admin.RoleAdmin)
	if !strings.HasPrefix(admin1.Secret, "apk_") || len(admin1.Secret) != 56 || admin1.Prefix != admin1.Secret[:8] {
		t.Errorf("key = %q prefix %q, want apk_ and 52 characters, prefix its first 8", admin1.Secret, admin1.Prefix)
	}
	var created admin.MintedKey
	f.expect(t, "POST", "/admin-keys", admin1.Secret, `{"name":"deploy","role":"operator"}`, http.StatusCreated, &created)
	if created.Role != admin.RoleOperator || created.OrgID != admin1.OrgID || created.CreatedBy != "key:"+admin1.ID || created.Name != "deploy" {
		t.Errorf("key made by a key = %+v, want role operator in org %s by key:%s", created.Key, admin1.OrgID, admin1.ID)
	}
	var list []admin.Key
	f.expect(t, "GET", "/admin-keys", created.Secret, "", http.StatusOK, &list)
	if len(list) != 2 || list[0].ID != created.ID || list[1].ID != admin1.ID {
		t.Fatalf("GET /admin-keys = %+v, want %s then %s", list, created.ID, admin1.ID)
	}

	f.expectError(t, "POST", "/admin-keys", masterToken, `{"name":"x","role":"root"}`, 400, `role "root" is not one of viewer, operator, admin`)
	f.expectError(t, "POST", "/admin-keys", masterToken, `{"name":"x"}`, 400, `role "" is not one of`)
	f.expectError(t, "POST", "/admin-keys", masterToken, `{"name":"x","role":"viewer","scope":"all"}`, 400, `unknown field "scope"`)
	f.expectError(t, "POST", "/admin-keys", masterToken, `{"name":"x","role":["viewer"]}`, 400, `field "role": expected a string, got array`)

	f.expect(t, "DELETE", "/admin-keys/"+created.ID, admin1.Secret, "", http.StatusNoContent, nil)
	f.expectError(t, "DELETE", "/admin-keys/"+created.ID, admin1.Secret, "", http.StatusNotFound, "not found")
	f.expectError(t, "GET", "/tokens", created.Secret, "", http.StatusUnauthorized, "invalid credentials")
}

func TestOrgs(t *testing.T) {
	f := newFixture(t)
	var o admin.Org
	f.expect(t, "POST", "/orgs", masterToken, `{"name":"acme"}`, http.StatusCreated, &o)
	if o.Name != "acme" || !strings.HasPrefix(o.ID, "org_") || o.CreatedAt.IsZero() {
		t.Errorf("POST /orgs = %+v, want acme with an org_ ID and a creation time", o)
	}
	f.expectError(t, "POST", "/orgs", masterToken, `{"name":"acme"}`, http.StatusConflict, `"acme" already exists`)
	f.expectError(t, "POST", "/orgs", masterToken, `{"name":"  "}`, http.StatusBadRequest, "name is required")
	f.expectError(t, "POST", "/orgs", masterToken, `{"name":"a\u0007b"}`, http.StatusBadRequest, "control characters")
	f.expectError(t, "POST", "/orgs", masterToken, `{"name":"`+strings.Repeat("n", 201)+`"}`, http.StatusBadRequest, "longer than 200 bytes")
	k := f.key(t, o.ID, admin.RoleAdmin)
	f.expectError(t, "POST", "/orgs", k.Secret, `{"name":"other"}`, http.StatusForbidden, "only the master token")
	other := f.org(t, "other")

	var orgs []admin.Org
	f.expect(t, "GET", "/orgs", masterToken, "", http.StatusOK, &orgs)
	if len(orgs) != 2 || orgs[0].ID != other || orgs[1].ID != o.ID {
		t.Errorf("GET /orgs as master = %+v, want other then acme", orgs)
	}
	f.expect(t, "GET", "/orgs", k.Secret, "", http.StatusOK, &orgs)
	if len(orgs) != 1 || orgs[0].ID != o.ID {
		t.Errorf("GET /orgs as a key of acme = %+v, want acme alone", orgs)
	}
}

func TestMaintenance(t *testing.T) {
	f := newFixture(t)
	a, b := f.org(t, "a"), f.org(t, "b")
	opA, opB := f.key(t, a, admin.RoleOperator), f.key(t, b, admin.RoleOperator)
	f.own(t, a, "app.example.com", "x.example.com")
	f.own(t, b, "*.b.example.com")

	f.expect(t, "PUT", "/maintenance/App.Example.com", opA.Secret, "", http.StatusNoContent, nil)
	f.expect(t, "PUT", "/maintenance/app.example.com", opA.Secret, "", http.StatusNoContent, nil) // idempotent
	f.expect(t, "PUT", "/maintenance/w.b.example.com", opB.Secret, "{}", http.StatusNoContent, nil)
	f.expect(t, "PUT", "/maintenance/*.b.example.com", opB.Secret, "", http.StatusNoContent, nil) // a wildcard b owns
	f.expect(t, "DELETE", "/maintenance/*.b.example.com", opB.Secret, "", http.StatusNoContent, nil)
	f.expectError(t, "PUT", "/maintenance/*.example.com", opA.Secret, "", http.StatusForbidden, "not among the hostnames organization "+a+" owns")
	f.expectError(t, "PUT", "/maintenance/app.example.com", opB.Secret, "", http.StatusForbidden, "not among the hostnames organization "+b+" owns")
	f.expectError(t, "PUT", "/maintenance/bad_host!", opA.Secret, "", http.StatusBadRequest, "invalid hostname")
	f.expectError(t, "PUT", "/maintenance/x.example.com", opA.Secret, `{"org_id":"`+b+`"}`, http.StatusBadRequest, "org_id may only be set with the master token")
	f.expectError(t, "PUT", "/maintenance/x.example.com", opA.Secret, `{"on":true}`, http.StatusBadRequest, `unknown field "on"`)
	f.expectError(t, "PUT", "/maintenance/master.example.com", masterToken, `{"org_id":"`+b+`"}`, http.StatusForbidden, "not among the hostnames")
	f.expect(t, "PUT", "/maintenance/m.b.example.com", masterToken, `{"org_id":"`+b+`"}`, http.StatusNoContent, nil)

	var list []admin.Maintenance
	f.expect(t, "GET", "/maintenance", opA.Secret, "", http.StatusOK, &list)
	if len(list) != 1 || list[0].Hostname != "app.example.com" || list[0].OrgID != a || list[0].By != "key:"+opA.ID {
		t.Errorf("GET /maintenance as a = %+v, want app.example.com set by key:%s", list, opA.ID)
	}
	f.expect(t, "GET", "/maintenance", masterToken, "", http.StatusOK, &list)
	var hosts []string
	for _, m := range list {
		hosts = append(hosts, m.Hostname)
	}
	if got, want := strings.Join(hosts, " "), "m.b.example.com w.b.example.com app.example.com"; got != want {
		t.Errorf("GET /maintenance as master = %s, want %s (newest first)", got, want)
	}

	f.expectError(t, "DELETE", "/maintenance/app.example.com", opB.Secret, "", http.StatusNotFound, "is not in maintenance")
	f.expect(t, "DELETE", "/maintenance/app.example.com", opA.Secret, "", http.StatusNoContent, nil)
	f.expectError(t, "DELETE", "/maintenance/app.example.com", opA.Secret, "", http.StatusNotFound, "app.example.com is not in maintenance")
	f.expect(t, "DELETE", "/maintenance/w.%62.example.com", masterToken, "", http.StatusNoContent, nil) // escaped more than needed

	var es []admin.AuditEntry
	f.expect(t, "GET", "/audit", opB.Secret, "", http.StatusOK, &es)
	var got []string
	for _, e := range es {
		got = append(got, e.Event+" "+e.Hostname+" "+e.Actor)
	}
	want := []string{
		"maintenance_off w.b.example.com master",
		"maintenance_on m.b.example.com master",
		"maintenance_off *.b.example.com key:" + opB.ID,
		"maintenance_on *.b.example.com key:" + opB.ID,
		"maintenance_on w.b.example.com key:" + opB.ID,
		"org_hostnames_set  master",
		"admin_key_created  master",
		"org_created  master",
	}
	if !slices.Equal(got, want) {
		t.Errorf("audit of b =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestOrgScoping runs two organizations side by side: each admin key sees
// and touches only its own, another organization's records answer 404, and
// the master token sees all.
func TestOrgScoping(t *testing.T) {
	f := newFixture(t)
	a, b := f.org(t, "a"), f.org(t, "b")
	adminA, adminB := f.key(t, a, admin.RoleAdmin), f.key(t, b, admin.RoleAdmin)
	f.own(t, a, "a.example.com")
	f.own(t, b, "b.example.com")
	tokA, tokB := f.token(t, adminA.Secret, "a.example.com"), f.token(t, adminB.Secret, "b.example.com")
	var keyB admin.MintedKey
	f.expect(t, "POST", "/admin-keys", adminB.Secret, `{"name":"b2","role":"viewer"}`, http.StatusCreated, &keyB)
	f.expect(t, "PUT", "/maintenance/b.example.com", adminB.Secret, "", http.StatusNoContent, nil)
	f.scaling.set(scalingView("scl_a", a, "a.example.com", 0), scalingView("scl_b", b, "b.example.com", 1))
	connected := f.clock.Now()
	f.clients.set(
		admin.ClientInfo{ID: "c-a", OrgID: a, Hostnames: []string{"a.example.com"}, ConnectedAt: connected},
		admin.ClientInfo{ID: "c-b", OrgID: b, ConnectedAt: connected.Add(time.Second)},
		admin.ClientInfo{ID: "c-master", ConnectedAt: connected.Add(2 * time.Second)},
	)

	ids := func(t *testing.T, path, cred string) string {
		t.Helper()
		var rows []struct {
			ID       string `json:"id"`
			Hostname string `json:"hostname"`
			Event    string `json:"event"`
		}
		f.expect(t, "GET", path, cred, "", http.StatusOK, &rows)
		var out []string
		for _, r := range rows {
			out = append(out, r.ID+r.Hostname)
		}
		return strings.Join(out, " ")
	}
	tests := []struct {
		path            string
		asA, asB, asAll string
	}{
		{"/tokens", tokA.ID, tokB.ID, tokB.ID + " " + tokA.ID},
		{"/admin-keys", adminA.ID, keyB.ID + " " + adminB.ID, keyB.ID + " " + adminB.ID + " " + adminA.ID},
		{"/orgs", a, b, b + " " + a},
		{"/clients", "c-a", "c-b", "c-master c-b c-a"},
		{"/maintenance", "", "b.example.com", "b.example.com"},
		{"/scaling", "scl_aa.example.com", "scl_bb.example.com", "scl_bb.example.com scl_aa.example.com"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			for _, c := range []struct{ who, cred, want string }{
				{"a", adminA.Secret, tt.asA}, {"b", adminB.Secret, tt.asB}, {"master", masterToken, tt.asAll},
			} {
				if got := ids(t, tt.path, c.cred); got != c.want {
					t.Errorf("GET %s as %s = %q, want %q", tt.path, c.who, got, c.want)
				}
			}
		})
	}

	t.Run("another org's records answer 404", func(t *testing.T) {
		f.expectError(t, "DELETE", "/tokens/"+tokB.ID, adminA.Secret, "", http.StatusNotFound, "not found")
		f.expectError(t, "DELETE", "/admin-keys/"+keyB.ID, adminA.Secret, "", http.StatusNotFound, "not found")
		f.expectError(t, "DELETE", "/maintenance/b.example.com", adminA.Secret, "", http.StatusNotFound, "not in maintenance")
		f.expectError(t, "DELETE", "/scaling/scl_b", adminA.Secret, "", http.StatusNotFound, "not found")
		var tok admin.Token
		f.expect(t, "DELETE", "/tokens/"+tokB.ID, masterToken, "", http.StatusOK, &tok)
		if tok.Status != admin.TokenRevoked {
			t.Errorf("master revoke of b's token = %+v, want revoked", tok)
		}
	})

	t.Run("audit", func(t *testing.T) {
		var es []admin.AuditEntry
		f.expect(t, "GET", "/audit", adminA.Secret, "", http.StatusOK, &es)
		for _, e := range es {
			if e.OrgID != a {
				t.Errorf("a's audit holds %+v of org %q", e, e.OrgID)
			}
		}
		if len(es) == 0 {
			t.Errorf("a's audit is empty, want its org_created, admin_key_created and token_created")
		}
		orgsSeen := map[string]bool{}
		for _, e := range f.audit(t) {
			orgsSeen[e.OrgID] = true
		}
		if !orgsSeen[a] || !orgsSeen[b] {
			t.Errorf("master's audit covers orgs %v, want a and b", orgsSeen)
		}
	})
}

func TestAuditEveryMutation(t *testing.T) {
	f := newFixture(t)
	org := f.org(t, "acme")
	k := f.key(t, org, admin.RoleAdmin)
	f.own(t, org, "app.example.com")
	tok := f.token(t, k.Secret, "app.example.com")
	f.expect(t, "DELETE", "/tokens/"+tok.ID, k.Secret, "", http.StatusOK, nil)
	f.expect(t, "PUT", "/maintenance/app.example.com", k.Secret, "", http.StatusNoContent, nil)
	f.expect(t, "DELETE", "/maintenance/app.example.com", k.Secret, "", http.StatusNoContent, nil)
	f.scaling.set(scalingView("scl_1", org, "app.example.com", 0))
	f.expect(t, "DELETE", "/scaling/scl_1", k.Secret, "", http.StatusNoContent, nil)
	other := f.key(t, org, admin.RoleViewer)
	f.expect(t, "DELETE", "/admin-keys/"+other.ID, k.Secret, "", http.StatusNoContent, nil)
	f.expectError(t, "GET", "/audit", "apk_wrong", "", http.StatusUnauthorized, "invalid credentials")

	var got []string
	entries := f.audit(t)
	for i, e := range entries {
		got = append(got, strings.Join([]string{e.Event, e.Actor, e.OrgID, e.Hostname}, " | "))
		// Newest first: each entry is chained after the next one listed.
		if i+1 < len(entries) {
			if older := entries[i+1]; e.Seq != older.Seq+1 || e.PrevHash != older.Hash || len(e.Hash) != 64 {
				t.Errorf("audit entry seq %d (prev_hash %s, hash %q) does not follow seq %d (hash %s)", e.Seq, e.PrevHash, e.Hash, older.Seq, older.Hash)
			}
		}
	}
	if last := entries[len(entries)-1]; last.Seq != 1 || last.PrevHash != strings.Repeat("0", 64) {
		t.Errorf("oldest audit entry = seq %d, prev_hash %s; want seq 1 after 64 zeros", last.Seq, last.PrevHash)
	}
	byKey := "key:" + k.ID
	want := []string{
		"login_failed | anonymous |  | ",
		"admin_key_deleted | " + byKey + " | " + org + " | ",
		"admin_key_created | master | " + org + " | ",
		"scaling_disarmed_by_operator | " + byKey + " | " + org + " | app.example.com",
		"maintenance_off | " + byKey + " | " + org + " | app.example.com",
		"maintenance_on | " + byKey + " | " + org + " | app.example.com",
		"token_revoked | " + byKey + " | " + org + " | ",
		"token_created | " + byKey + " | " + org + " | app.example.com",
		"org_hostnames_set | master | " + org + " | ",
		"admin_key_created | master | " + org + " | ",
		"org_created | master | " + org + " | ",
	}
	if !slices.Equal(got, want) {
		t.Errorf("audit =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var limited []admin.AuditEntry
	f.expect(t, "GET", "/audit?limit=2", k.Secret, "", http.StatusOK, &limited)
	if len(limited) != 2 || limited[0].Event != admin.EventAdminKeyDeleted {
		t.Errorf("GET /audit?limit=2 = %+v, want the two newest of the org", limited)
	}
	for _, q := range []string{"abc", "0", "-1", "1001", "1.5"} {
		f.expectError(t, "GET", "/audit?limit="+q, k.Secret, "", http.StatusBadRequest, "is not a number from 1 to 1000")
	}
}

// TestSecretsNeverShown mints a token and a key and checks that no listing,
// audit entry or log line carries the secrets or their hashes.
func TestSecretsNeverShown(t *testing.T) {
	f := newFixture(t)
	k := f.key(t, "", admin.RoleAdmin)
	tok := f.token(t, k.Secret, "app.example.com")
	f.expectError(t, "GET", "/tokens", tok.Secret, "", http.StatusUnauthorized, "invalid credentials")
	var forbidden []string
	for _, s := range []string{k.Secret, tok.Secret} {
		sum := sha256.Sum256([]byte(s))
		forbidden = append(forbidden, s, s[8:], hex.EncodeToString(sum[:]), base64.StdEncoding.EncodeToString(sum[:]))
	}
	for _, path := range []string{"/tokens", "/admin-keys", "/audit", "/orgs"} {
		for _, cred := range []string{masterToken, k.Secret} {
			_, body := f.call(t, "GET", path, cred, "")
			for _, s := range forbidden {
				if strings.Contains(string(body), s) {
					t.Errorf("GET %s shows secret material %q: %s", path, s, body)
				}
			}
		}
	}
	for _, s := range forbidden {
		if strings.Contains(f.logs.String(), s) {
			t.Errorf("log holds secret material %q", s)
		}
	}
}

func TestStoreUnavailable(t *testing.T) {
	f := newFixture(t)
	k := f.key(t, "", admin.RoleAdmin)
	if err := f.db.Close(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, method, path, cred, body string
	}{
		{"list as master", "GET", "/tokens", masterToken, ""},
		{"mint as master", "POST", "/tokens", masterToken, `{"name":"x","hostnames":["a.example.com"]}`},
		{"key lookup", "GET", "/tokens", k.Secret, ""},
		{"audit", "GET", "/audit", masterToken, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.expectError(t, tt.method, tt.path, tt.cred, tt.body, http.StatusServiceUnavailable, "store is unavailable")
		})
	}
	if !strings.Contains(f.logs.String(), `msg="store unavailable"`) {
		t.Errorf("log = %q, want a store unavailable line", f.logs.String())
	}
}

func TestUnknownRoutes(t *testing.T) {
	f := newFixture(t)
	f.expectError(t, "GET", "/nope", masterToken, "", http.StatusNotFound, "no such endpoint: GET /aperio/api/nope")
	f.expectError(t, "PATCH", "/tokens", masterToken, "", http.StatusMethodNotAllowed, "method PATCH is not allowed")
}

func TestClientsList(t *testing.T) {
	f := newFixture(t)
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	f.clients.set(
		admin.ClientInfo{ID: "old", Name: "web-1", ConnectedAt: at},
		admin.ClientInfo{
			ID: "new", Name: "web-2", Hostnames: []string{"app.example.com"}, Path: "/api", Priority: 1,
			MaxConcurrent: 10, Inflight: 3, Healthy: true, Draining: true, ConnectedAt: at.Add(time.Hour), RemoteAddr: "192.0.2.1:5000",
		},
	)
	_, body := f.call(t, "GET", "/clients", masterToken, "")
	var rows []map[string]any
	if err := json.Unmarshal(body, &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0]["id"] != "new" || rows[1]["id"] != "old" {
		t.Fatalf("GET /clients = %s, want new then old", body)
	}
	for _, field := range []string{"id", "name", "hostnames", "path", "priority", "max_concurrent", "inflight", "healthy", "draining", "connected_at", "remote_addr", "org_id"} {
		if _, ok := rows[0][field]; !ok {
			t.Errorf("GET /clients row lacks %q: %s", field, body)
		}
	}
	if h, ok := rows[1]["hostnames"].([]any); !ok || len(h) != 0 {
		t.Errorf("hostnames of a client with none = %v, want []", rows[1]["hostnames"])
	}
}

// TestMountedUnderChi serves the handler from a parent chi router, which
// leaves its own routing context in the request.
func TestMountedUnderChi(t *testing.T) {
	f := newFixture(t)
	api, err := admin.New(admin.Config{MasterToken: masterToken, Store: f.db})
	if err != nil {
		t.Fatal(err)
	}
	for _, mount := range []string{"mount", "handle"} {
		t.Run(mount, func(t *testing.T) {
			r := chi.NewRouter()
			if mount == "mount" {
				r.Mount(admin.Prefix, api.Handler())
			} else {
				r.Handle(admin.Prefix+"/*", api.Handler())
			}
			srv := httptest.NewServer(r)
			t.Cleanup(srv.Close)
			g := &fixture{url: srv.URL}
			g.expect(t, "GET", "/tokens", masterToken, "", http.StatusOK, nil)
			g.expect(t, "DELETE", "/maintenance/x.example.com", masterToken, "", http.StatusNotFound, nil)
		})
	}
}

// TestOrgIDFromMasterPicksOrg checks that the master token creates in the
// organization it names, and in the default one otherwise.
func TestOrgIDFromMasterPicksOrg(t *testing.T) {
	f := newFixture(t)
	org := f.org(t, "acme")
	f.own(t, org, "a.example.com")
	var tok admin.MintedToken
	f.expect(t, "POST", "/tokens", masterToken, `{"name":"x","hostnames":["b.example.com"],"org_id":"`+org+`"}`, http.StatusForbidden, nil)
	f.expect(t, "POST", "/tokens", masterToken, `{"name":"x","hostnames":["a.example.com"],"org_id":"`+org+`"}`, http.StatusCreated, &tok)
	var k admin.MintedKey
	f.expect(t, "POST", "/admin-keys", masterToken, `{"name":"x","role":"viewer","org_id":"`+org+`"}`, http.StatusCreated, &k)
	if tok.OrgID != org || k.OrgID != org {
		t.Errorf("org of token, key minted with org_id %s = %s, %s", org, tok.OrgID, k.OrgID)
	}
	def, err := f.db.EnsureOrg(context.Background(), admin.DefaultOrg)
	if err != nil {
		t.Fatal(err)
	}
	f.expect(t, "POST", "/tokens", masterToken, `{"name":"x","hostnames":["a.example.com"]}`, http.StatusForbidden, nil) // acme's
	f.expect(t, "POST", "/tokens", masterToken, `{"name":"x","hostnames":["d.example.com"]}`, http.StatusCreated, &tok)
	if tok.OrgID != def.ID {
		t.Errorf("org of a token minted without org_id = %s, want default %s", tok.OrgID, def.ID)
	}
}
