package job

import (
	"hash/fnv"
	"strconv"
	"strings"
)

// Broker shards spread a queue over several asynq queues, <queue>.s<i>-<j>.
// Design: docs/design/broker-shards.md

// ShardQueue is the queue tenant's jobs of queue go to with shards shards:
// queue itself when shards is 1 or less.
func ShardQueue(queue, tenant string, shards int) string {
	if shards <= 1 {
		return queue
	}
	return shardName(queue, shardIndex(tenant, shards), shards)
}

// shardIndex is tenant's shard of shards: a stable hash.
func shardIndex(tenant string, shards int) int {
	if shards <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(tenant))
	return int(h.Sum32() % uint32(shards))
}

// ShardQueues are every shard queue of queue, in shard order: queue
// itself when shards is 1 or less.
func ShardQueues(queue string, shards int) []string {
	if shards <= 1 {
		return []string{queue}
	}
	out := make([]string, shards)
	for i := range out {
		out[i] = shardName(queue, i, shards)
	}
	return out
}

// clusterSlots is the number of Redis Cluster hash slots.
const clusterSlots = 16384

// shardName is shard i of n of queue: the first "<queue>.s<i>-<j>" whose
// slot lies in [i·16384/n, (i+1)·16384/n). j stays small: one name in n
// falls in the range.
func shardName(queue string, i, n int) string {
	lo, hi := i*clusterSlots/n, (i+1)*clusterSlots/n
	prefix := queue + ".s" + strconv.Itoa(i) + "-"
	for j := 0; ; j++ {
		name := prefix + strconv.Itoa(j)
		if s := int(crc16([]byte(name)) % clusterSlots); s >= lo && s < hi {
			return name
		}
	}
}

// QueueSlot is the Redis Cluster hash slot of an asynq queue's keys.
func QueueSlot(queue string) int { return int(crc16([]byte(queue)) % clusterSlots) }

// crc16 is CRC-16/XMODEM, the checksum Redis Cluster hashes keys with.
func crc16(b []byte) uint16 {
	var crc uint16
	for _, c := range b {
		crc ^= uint16(c) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// BaseQueue is the queue a shard queue spreads ("payments" for
// "payments.s3-1"); any other name is its own.
func BaseQueue(name string) string {
	i := strings.LastIndex(name, ".s")
	if i < 0 {
		return name
	}
	idx, j, ok := strings.Cut(name[i+2:], "-")
	if !ok || idx == "" || j == "" || strings.Trim(idx, "0123456789") != "" || strings.Trim(j, "0123456789") != "" {
		return name
	}
	return name[:i]
}
