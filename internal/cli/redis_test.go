package cli

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// A failover redis_url gives the gateway's client and asynq's the same
// master, sentinels, credentials and database.
func TestRedisFailoverURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, url string
		want      asynq.RedisFailoverClientOpt
	}{
		{
			name: "three sentinels",
			url:  "redis://sentinel-1:26379/0?master_name=mymaster&addr=sentinel-2:26379&addr=sentinel-3:26379",
			want: asynq.RedisFailoverClientOpt{
				MasterName:    "mymaster",
				SentinelAddrs: []string{"sentinel-1:26379", "sentinel-2:26379", "sentinel-3:26379"},
			},
		},
		{
			name: "passwords, database and timeouts",
			url:  "redis://watcher:sentinel-pw@s1:26379/3?master_name=m&addr=s2:26380&username=app&password=master-pw&dial_timeout=2s&read_timeout=4",
			want: asynq.RedisFailoverClientOpt{
				MasterName:       "m",
				SentinelAddrs:    []string{"s1:26379", "s2:26380"},
				SentinelUsername: "watcher",
				SentinelPassword: "sentinel-pw",
				Username:         "app",
				Password:         "master-pw",
				DB:               3,
				DialTimeout:      2 * time.Second,
				ReadTimeout:      4 * time.Second,
			},
		},
		{
			name: "the database as a parameter",
			url:  "redis://s1:26379?master_name=m&db=5",
			want: asynq.RedisFailoverClientOpt{MasterName: "m", SentinelAddrs: []string{"s1:26379"}, DB: 5},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fo, err := redisFailover(tc.url)
			if err != nil || fo == nil {
				t.Fatalf("redisFailover: %v, %v", fo, err)
			}
			got := asynqFailover(fo)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("asynq's options\n got %+v\nwant %+v", got, tc.want)
			}
			// The gateway's client is built from fo itself: compare the
			// fields asynq has with it.
			gw := asynq.RedisFailoverClientOpt{
				MasterName: fo.MasterName, SentinelAddrs: fo.SentinelAddrs,
				SentinelUsername: fo.SentinelUsername, SentinelPassword: fo.SentinelPassword,
				Username: fo.Username, Password: fo.Password, DB: fo.DB,
				DialTimeout: fo.DialTimeout, ReadTimeout: fo.ReadTimeout, WriteTimeout: fo.WriteTimeout,
				PoolSize: fo.PoolSize, TLSConfig: fo.TLSConfig,
			}
			if !reflect.DeepEqual(gw, tc.want) {
				t.Errorf("the gateway's options\n got %+v\nwant %+v", gw, tc.want)
			}

			opt, err := asynqRedis(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(opt, tc.want) {
				t.Errorf("asynqRedis = %#v, want the failover options %+v", opt, tc.want)
			}
			rdb, err := newRedis(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			defer rdb.Close()
			if _, ok := rdb.(*redis.Client); !ok {
				t.Errorf("newRedis = %T, want the failover *redis.Client", rdb)
			}
		})
	}
}

// Without master_name a redis:// URL is one node, as before; asynq reads
// it as go-redis does, user and pool size included.
func TestRedisURLWithoutMasterName(t *testing.T) {
	t.Parallel()
	fo, err := redisFailover("redis://r:6379/2")
	if fo != nil || err != nil {
		t.Fatalf("redisFailover = %v, %v; want nil, nil", fo, err)
	}
	opt, err := asynqRedis("redis://app:pw@r:6379/2?pool_size=5")
	if err != nil {
		t.Fatal(err)
	}
	if want := (asynq.RedisClientOpt{Network: "tcp", Addr: "r:6379", Username: "app", Password: "pw", DB: 2, PoolSize: 5}); !reflect.DeepEqual(opt, want) {
		t.Errorf("asynqRedis = %#v, want %#v", opt, want)
	}
}

// A failover URL go-redis refuses is a usage error (exit code 2) from
// both constructors.
func TestRedisFailoverURLProblems(t *testing.T) {
	t.Parallel()
	for _, u := range []string{
		"redis://s1:26379/0?master_name=",
		"redis://s1:26379/0?master_name=m&addr=s2",
		"redis://s1:26379/x?master_name=m",
		"redis://s1:26379/0?master_name=m&sentinel_password=x",
	} {
		var ue *usageError
		if _, err := newRedis(u); !errors.As(err, &ue) {
			t.Errorf("newRedis(%q): %v, want a usage error", u, err)
		}
		if _, err := asynqRedis(u); !errors.As(err, &ue) {
			t.Errorf("asynqRedis(%q): %v, want a usage error", u, err)
		}
	}
}

// config check reads REDIS_URL's failover form as the clients will, and
// reports what go-redis would refuse as a configuration problem (exit 2).
func TestConfigCheckRedisFailoverURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, url string
		code      int
		want      string
	}{
		{"three sentinels", "redis://:pw@s1:26379/0?master_name=mymaster&addr=s2:26379&addr=s3:26379&password=pw", 0, "ok ("},
		{"a sentinel without its port", "redis://s1:26379/0?master_name=mymaster&addr=s2", 2, `redis_url: addr "s2" is not a sentinel's host:port (from REDIS_URL)`},
		{"an unknown parameter", "redis://s1:26379/0?master_name=mymaster&sentinels=3", 2, "redis_url: unknown parameter sentinels (from REDIS_URL)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, out, errOut := cli(t, map[string]string{"DATABASE_URL": "postgres://x@127.0.0.1/db", "REDIS_URL": tc.url},
				"config", "check", "--config", "../../deploy/local/idemgate.yaml")
			if code != tc.code || !strings.Contains(out+errOut, tc.want) {
				t.Fatalf("exit %d (want %d); output %q lacks %q", code, tc.code, out+errOut, tc.want)
			}
			if strings.Contains(out+errOut, ":pw@") {
				t.Errorf("the output shows the password: %q", out+errOut)
			}
		})
	}
}
