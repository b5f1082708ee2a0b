#!/usr/bin/env bash
# Installs the queue peers that benches compare Lockstep with (benches/common/peers): Debian's
# redis-server, rabbitmq-server and nats-server. Idempotent: whatever is already installed is
# skipped. The benchmarks start their own privately configured instance of each (loopback port,
# data in a temp dir), so the system services these packages bring are stopped and disabled
# here: they would otherwise hold ports 6379, 5672/25672/4369 (epmd) and 4222 and spend CPU.
#
# Needs root (apt-get). Run `apt-get update` first on a fresh machine (done here if needed).
set -euo pipefail

PACKAGES=(redis-server rabbitmq-server nats-server)
SERVICES=(redis-server rabbitmq-server nats-server)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "install-bench-peers: installing ${missing[*]}"
  # Keep the packages' maintainer scripts from starting their services at all (invoke-rc.d
  # honours policy-rc.d; exit 101 = action forbidden). Only while installing, and only if the
  # machine has no policy of its own.
  policy=/usr/sbin/policy-rc.d
  own_policy=0
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    own_policy=1
  fi
  trap 'if [[ $own_policy == 1 ]]; then rm -f "$policy"; fi' EXIT
  if ! apt-get install -y --no-install-recommends "${missing[@]}"; then
    apt-get update
    apt-get install -y --no-install-recommends "${missing[@]}"
  fi
else
  echo "install-bench-peers: ${PACKAGES[*]} already installed"
fi

# Whatever the packages (or an earlier install) started: stop it and keep it from starting at boot.
for s in "${SERVICES[@]}"; do
  if command -v systemctl >/dev/null && [[ -d /run/systemd/system ]]; then
    systemctl disable --now "$s" >/dev/null 2>&1 || true
  fi
  if [[ -x /etc/init.d/$s ]]; then
    /etc/init.d/"$s" stop >/dev/null 2>&1 || true
    update-rc.d "$s" disable >/dev/null 2>&1 || true
  fi
done
# The package's maintainer scripts run Erlang tools that leave the system's Erlang port mapper
# (epmd, port 4369, user rabbitmq) running. The benchmarks' RabbitMQ uses its own epmd on a
# private port and stops it afterwards; stop the system one if no node is registered with it.
if pgrep -u rabbitmq -x epmd >/dev/null 2>&1 && ! epmd -names 2>/dev/null | grep -q '^name '; then
  epmd -kill >/dev/null 2>&1 || true
fi

for b in redis-server rabbitmq-server nats-server; do
  command -v "$b" >/dev/null || [[ -x /usr/lib/rabbitmq/bin/$b ]] || [[ -x /usr/sbin/$b ]] || {
    echo "install-bench-peers: $b not found after install" >&2
    exit 1
  }
done
echo "install-bench-peers: redis $(redis-server --version | awk '{print $3}'), nats $(nats-server --version 2>&1 | awk '{print $2}'), rabbitmq $(dpkg-query -W -f='${Version}' rabbitmq-server)"
