// Package manifests holds the tests of the deployment files: the
// Dockerfile, deploy/compose and deploy/kubernetes. It is a module of its
// own so that the idemgate module does not depend on the Kubernetes API
// and kustomize.
//
// The tests render both kustomizations with kustomize's Go API, decode
// every object strictly into its Kubernetes type, and check what a user
// would run into: probes on paths and ports the gateway serves, a
// configuration that `idemgate config check` accepts with the Secret's
// keys, selectors that select the pods, a Dockerfile that builds what
// `make build` builds. They need no cluster, no kubectl and no container
// engine; they build bin/idemgate from the repository (or use the binary
// named by IDEMGATE_BIN).
//
//	cd deploy/manifests && go test ./...
package manifests
