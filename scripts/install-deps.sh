#!/usr/bin/env bash
# Installs what the tests need and the machine lacks: the Redis server,
# Sentinel and CLI, ZooKeeper (with a Java runtime), promtool,
# systemd-analyze and Chromium, from the OS packages. Safe to run again.
set -euo pipefail
missing=()
command -v redis-server   >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-sentinel >/dev/null 2>&1 || missing+=(redis-sentinel)
command -v redis-cli      >/dev/null 2>&1 || missing+=(redis-tools)
# ZooKeeper's server is the zookeeper package's libzookeeper-java; with a
# headless Java runtime it runs without the desktop one zookeeper pulls.
[ -f /usr/share/java/zookeeper.jar ] || missing+=(libzookeeper-java)
command -v java >/dev/null 2>&1 || missing+=(default-jre-headless)
# promtool tests the Prometheus rules (deploy/prometheus).
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
# systemd-analyze verifies the systemd unit (deploy/systemd).
command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)
# Headless Chromium loads the admin port's live page (/ui).
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-deps: need ${missing[*]} (no apt-get here; install them by hand)" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "install-deps: installing ${missing[*]}" >&2
$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
# redis-sentinel is packaged separately on Debian.
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# The package starts a system Redis on 6379; tests start their own, so stop it.
($sudo service redis-server stop || true) >/dev/null 2>&1
($sudo service redis-sentinel stop || true) >/dev/null 2>&1
($sudo service prometheus stop || true) >/dev/null 2>&1
