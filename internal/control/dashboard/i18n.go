package dashboard

import (
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"sort"
	"strconv"
	"strings"
)

//go:embed i18n
var catalogFS embed.FS

// defaultLang is the language of a browser that asks for none we have.
const defaultLang = "en"

// langCookie keeps the language a user picked with the switch; it beats
// Accept-Language.
const langCookie = "aperio_lang"

// catalogs holds every language's messages by key. Each language is the
// union of its files i18n/<lang>/*.json (one per page, so pages add
// messages without touching each other's), each a flat JSON object of
// key → text.
type catalogs map[string]map[string]string

// loadCatalogs reads the embedded message catalogs. It fails on a
// malformed file, a key defined twice in one language, or a key that one
// language has and another lacks: a missing translation is a build
// error, not a blank on a page.
func loadCatalogs(fsys fs.FS) (catalogs, error) {
	langs, err := fs.ReadDir(fsys, "i18n")
	if err != nil {
		return nil, fmt.Errorf("dashboard: message catalogs: %w", err)
	}
	cs := catalogs{}
	for _, l := range langs {
		if !l.IsDir() {
			continue
		}
		lang := l.Name()
		msgs := map[string]string{}
		files, err := fs.Glob(fsys, path.Join("i18n", lang, "*.json"))
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			b, err := fs.ReadFile(fsys, f)
			if err != nil {
				return nil, err
			}
			var m map[string]string
			if err := json.Unmarshal(b, &m); err != nil {
				return nil, fmt.Errorf("dashboard: %s: %w", f, err)
			}
			for k, v := range m {
				if _, dup := msgs[k]; dup {
					return nil, fmt.Errorf("dashboard: %s: message %q is defined twice for %s", f, k, lang)
				}
				msgs[k] = v
			}
		}
		cs[lang] = msgs
	}
	base, ok := cs[defaultLang]
	if !ok {
		return nil, fmt.Errorf("dashboard: no %s catalog", defaultLang)
	}
	for lang, msgs := range cs {
		for k := range base {
			if _, ok := msgs[k]; !ok {
				return nil, fmt.Errorf("dashboard: message %q has no %s translation", k, lang)
			}
		}
		for k := range msgs {
			if _, ok := base[k]; !ok {
				return nil, fmt.Errorf("dashboard: message %q of %s is not in the %s catalog", k, lang, defaultLang)
			}
		}
	}
	return cs, nil
}

// languages returns the catalogs' languages, sorted.
func (cs catalogs) languages() []string {
	out := make([]string, 0, len(cs))
	for l := range cs {
		out = append(out, l)
	}
	sort.Strings(out)
	return out
}

// text returns the message key in lang, formatted with args when it has
// verbs. An unknown key shows as itself, so a missing message is visible
// (and caught by the tests) rather than blank.
func (cs catalogs) text(lang, key string, args ...any) string {
	s, ok := cs[lang][key]
	if !ok {
		return key
	}
	if len(args) > 0 {
		return fmt.Sprintf(s, args...)
	}
	return s
}

// maxAcceptLanguage bounds the header parsed: longer ones are read only
// that far.
const maxAcceptLanguage = 512

// pick chooses r's language: the switch's cookie if it names a catalog,
// else the best of Accept-Language's ranges we have (by q, then order;
// "de-CH" matches "de"), else defaultLang.
func (cs catalogs) pick(r *http.Request) string {
	if c, err := r.Cookie(langCookie); err == nil {
		if _, ok := cs[c.Value]; ok {
			return c.Value
		}
	}
	h := r.Header.Get("Accept-Language")
	if len(h) > maxAcceptLanguage {
		h = h[:maxAcceptLanguage]
	}
	best, bestQ := defaultLang, -1.0
	for i, part := range strings.Split(h, ",") {
		if i >= 32 {
			break
		}
		tag, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		q := 1.0
		if v, ok := strings.CutPrefix(strings.TrimSpace(params), "q="); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f < 0 || f > 1 {
				continue
			}
			q = f
		}
		base, _, _ := strings.Cut(strings.ToLower(tag), "-")
		if _, ok := cs[base]; ok && q > bestQ && q > 0 {
			best, bestQ = base, q
		}
	}
	return best
}
