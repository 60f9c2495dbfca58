// Package requestid gives every request an id: the client's X-Request-Id
// when it sent a sane one, a new UUIDv7 otherwise. The id is echoed in the
// response header and readable with FromContext, so logs and problem
// bodies can name it. URN turns an id into the urn:uuid: that names the
// occurrence in a problem document's instance (RFC 9457).
//
//	handler = requestid.Middleware(handler)
//	id := requestid.FromContext(r.Context())
//	instance := requestid.URN(id) // urn:uuid:0193…
package requestid
