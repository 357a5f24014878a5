// etcd built from Go modules: `go install go.etcd.io/etcd/server/v3@vX` is refused because the
// etcd server module carries replace directives, so this wrapper calls the same entry point.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
