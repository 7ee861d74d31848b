package zkrules

import (
	"fmt"
	"os"
	"strings"

	"github.com/go-zookeeper/zk"
)

// Auth is a ZooKeeper digest identity, as `addauth digest user:password`
// gives one: sidecars read protected rules with it, `sluice rules push`
// writes them with it.
type Auth struct {
	User, Password string
}

// LoadAuth reads a digest identity from file, which holds
// "user:password" (white space around it ignored). A file keeps the
// password out of the configuration, of command lines and of /proc.
func LoadAuth(file string) (*Auth, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("zookeeper auth: %w", err)
	}
	user, password, ok := strings.Cut(strings.TrimSpace(string(data)), ":")
	if !ok || user == "" || password == "" {
		return nil, fmt.Errorf("zookeeper auth: %s: want one line user:password", file)
	}
	return &Auth{User: user, Password: password}, nil
}

// add authenticates conn's session (and, through the client, every
// session it re-establishes). Digest authentication never fails here: a
// wrong password only makes protected znodes answer "not authenticated".
func (a *Auth) add(conn *zk.Conn) error {
	if err := conn.AddAuth("digest", []byte(a.User+":"+a.Password)); err != nil {
		return fmt.Errorf("zookeeper auth: %w", err)
	}
	return nil
}

// ACL returns the ACL Push gives the znodes it creates. Without a writer,
// anyone may do anything (ZooKeeper's open default). With one, only the
// writer may change them, and they are readable by readers when given,
// else by anyone.
func ACL(writer, readers *Auth) []zk.ACL {
	if writer == nil {
		return zk.WorldACL(zk.PermAll)
	}
	acl := zk.DigestACL(zk.PermAll, writer.User, writer.Password)
	if readers != nil {
		return append(acl, zk.DigestACL(zk.PermRead, readers.User, readers.Password)...)
	}
	return append(acl, zk.WorldACL(zk.PermRead)...)
}
