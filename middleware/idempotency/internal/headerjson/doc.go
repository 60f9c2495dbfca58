// Package headerjson encodes an http.Header as encoding/json does, byte
// for byte, without reflection: the stores write a response's header with
// every completion, on the request path, and json.Marshal spends eight allocations
// and a reflection walk on it.
//
//	value := headerjson.Append(make([]byte, 0, headerjson.Size(h)), h) // what json.Marshal(h) returns
package headerjson
