package config

import (
	"strings"
	"testing"
)

func TestDatabaseDirectURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, yaml string
		env        map[string]string
		want       string // the error; "" for none
		direct     string // DatabaseDirectURL when there is no error
	}{
		{
			name:   "beside a pooled database_url",
			yaml:   minimal + "database_url: postgres://u@pgbouncer:6432/app?default_query_exec_mode=exec\ndatabase_direct_url: postgres://u@db:5432/app\n",
			direct: "postgres://u@db:5432/app",
		},
		{
			name:   "unset: the pool's URL serves",
			yaml:   minimal + "database_url: postgres://u@db/app\n",
			direct: "",
		},
		{
			name:   "DATABASE_DIRECT_URL replaces the file's value",
			yaml:   minimal + "database_url: postgres://u@pgbouncer/app\ndatabase_direct_url: postgres://u@file/app\n",
			env:    map[string]string{"DATABASE_DIRECT_URL": "host=/run/postgresql dbname=app"},
			direct: "host=/run/postgresql dbname=app",
		},
		{
			name: "checked like database_url, without echoing the password",
			yaml: minimal + "database_url: postgres://u@pgbouncer/app\ndatabase_direct_url: mysql://u:hunter2@db/app\n",
			want: `x.yaml:5: database_direct_url: scheme "mysql" is not postgres or postgresql`,
		},
		{
			name: "meaningless without database_url",
			yaml: minimal + "database_direct_url: postgres://u@db/app\n",
			want: "x.yaml:4: database_direct_url: is a direct connection to database_url's database, and database_url is not set (set it here or in DATABASE_URL)",
		},
		{
			name: "a typo is named with its likely key",
			yaml: minimal + "database_url: postgres://u@db/app\ndatabse_direct_url: postgres://u@db/app\n",
			want: `x.yaml:5: databse_direct_url: unknown key; did you mean "database_direct_url"?`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := Parse([]byte(tc.yaml), "x.yaml", func(k string) string { return tc.env[k] })
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Parse: %v", err)
			case tc.want == "":
				if cfg.DatabaseDirectURL != tc.direct {
					t.Fatalf("DatabaseDirectURL = %q, want %q", cfg.DatabaseDirectURL, tc.direct)
				}
			case err == nil:
				t.Fatalf("Parse accepted it; want %s", tc.want)
			case !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "hunter2"):
				t.Fatalf("err = %v\nwant %s (and no password)", err, tc.want)
			}
		})
	}
}

// A connection string is read as pgx reads it at start-up, so config check
// refuses what start-up would, without echoing the password.
func TestDatabaseURLReadAsPgxReadsIt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ url, want string }{
		{"postgres://u:hunter2@db:5432/app?sslmode=verify-full", ""},
		{"postgres://u@db1:5432,db2:5432/app?target_session_attrs=read-write", ""},
		{"postgres://u@db/app?pool_max_conns=8", ""},
		{"host=db dbname=app password=hunter2", ""},
		{"postgres://u:hunter2@db:5432/app?sslmode=sometimes", "failed to configure TLS (sslmode is invalid)"},
		{"postgres://u:hunter2@db/app?connect_timeout=soon", `invalid connect_timeout (strconv.ParseInt: parsing "soon": invalid syntax)`},
		{"postgres://u:hunter2@db/app?pool_max_conns=many", `cannot parse pool_max_conns (strconv.ParseInt: parsing "many": invalid syntax)`},
		{"host=db port=five password=hunter2", "invalid port"},
	} {
		got := databaseURLProblem(tc.url)
		if got != tc.want {
			t.Errorf("databaseURLProblem(%q) = %q, want %q", tc.url, got, tc.want)
		}
		if strings.Contains(got, "hunter2") {
			t.Errorf("databaseURLProblem(%q) echoes the password: %q", tc.url, got)
		}
	}
}
