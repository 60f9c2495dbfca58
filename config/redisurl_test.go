package config

import "testing"

// clusterAsURL is the answer to a Redis Cluster written as a redis:// URL,
// which go-redis would read as one host named "a:7000,b:7001,c".
const clusterAsURL = "a Redis Cluster is the comma list of its nodes without a scheme, path or parameters (h1:7000,h2:7001,h3:7002), not a redis:// URL"

func TestRedisURLProblem(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, url, want string
	}{
		{"one node", "redis://r:6379/0", ""},
		{"one node with options", "rediss://:pw@r:6379/1?dial_timeout=3s", ""},
		{"cluster nodes", "a:7000,b:7001", ""},
		{"cluster nodes written as a URL", "redis://a:7000,b:7001,c:7002/0", clusterAsURL},
		{"cluster nodes written as a TLS URL", "rediss://:pw@a:7000,b:7001", clusterAsURL},
		{"sentinels", "redis://s1:26379/0?master_name=mymaster&addr=s2:26379&addr=s3:26379", ""},
		{"sentinels with passwords and db", "redis://:sentinel-pw@s1:26379?master_name=m&password=pw&username=u&db=2", ""},
		{"sentinels over TLS", "rediss://s1:26379?master_name=m&skip_verify=true", ""},
		{"an unknown parameter", "redis://r:6379/0?poolsize=3", "unknown parameter poolsize"},
		{"a database that is not a number", "redis://r:6379/x", `invalid database number: "x"`},
		{"an empty master name", "redis://s1:26379/0?master_name=", "master_name is empty: name the master the sentinels monitor"},
		{"sentinels without a master name", "redis://s1:26379/0?addr=s2:26379", "addr lists more sentinels, which needs master_name=NAME, the master the sentinels monitor"},
		{"the first sentinel without a port", "redis://s1/0?master_name=m", `the sentinel "s1" has no port (sentinels usually listen on 26379)`},
		{"a sentinel without a port", "redis://s1:26379/0?master_name=m&addr=s2", `addr "s2" is not a sentinel's host:port`},
		{"a sentinel without a host", "redis://s1:26379/0?master_name=m&addr=:26379", `addr ":26379" is not a sentinel's host:port`},
		{"a failover database that is not a number", "redis://s1:26379/x?master_name=m", `invalid database number: "x"`},
		{"a failover path of two segments", "redis://s1:26379/0/1?master_name=m", "invalid URL path: /0/1"},
		{"a failover unknown parameter", "redis://s1:26379/0?master_name=m&sentinels=3", "unknown parameter sentinels"},
		{"a bad failover timeout", "redis://s1:26379/0?master_name=m&dial_timeout=soon", `invalid dial_timeout duration: time: invalid duration "soon"`},
		{
			"the sentinels' password as a parameter",
			"redis://s1:26379/0?master_name=m&sentinel_password=hunter2",
			"sentinel_password is not a parameter: the sentinels' user and password go in the URL's user info (redis://user:password@sentinel:26379/0?master_name=…), the master's in username= and password=",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := redisURLProblem(tc.url); got != tc.want {
				t.Errorf("redisURLProblem(%q)\n got %q\nwant %q", tc.url, got, tc.want)
			}
		})
	}
}

// A failover URL's problem is reported at its line, like any other, and
// its passwords are not echoed.
func TestRedisFailoverURLInAFile(t *testing.T) {
	t.Parallel()
	_, err := Parse([]byte(minimal+"redis_url: redis://:hunter2@s1:26379/0?master_name=m&password=hunter2&addr=s2\n"), "x.yaml", nil)
	const want = `x.yaml:4: redis_url: addr "s2" is not a sentinel's host:port`
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v, want %s", err, want)
	}
}
