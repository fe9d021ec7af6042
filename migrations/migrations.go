// Package migrations owns the database schema of the store: numbered,
// forward-only SQL files, one directory per dialect (sqlite/ and postgres/),
// embedded in the binary. Both directories hold the same versions under the
// same names, so version N means the same schema on either backend. The
// store applies them at startup with goose; files carry goose annotations
// and no Down section, since a schema is never rolled back in place.
package migrations

import (
	"embed"
	"io/fs"
)

//go:embed sqlite/*.sql postgres/*.sql
var files embed.FS

// SQLite returns the SQLite migrations, with the files at the root of the
// returned file system. It is safe for concurrent use.
func SQLite() fs.FS { return sub("sqlite") }

// Postgres returns the PostgreSQL migrations, with the files at the root of
// the returned file system. It is safe for concurrent use.
func Postgres() fs.FS { return sub("postgres") }

func sub(dir string) fs.FS {
	f, err := fs.Sub(files, dir)
	if err != nil {
		panic("migrations: " + err.Error()) // impossible: dir is a constant embedded above
	}
	return f
}
