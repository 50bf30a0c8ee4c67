#!/usr/bin/env bash
# Installs what the push tests need from Debian: Distribution 2.8's registry binary
# (package docker-registry). Tests start their own registries on 127.0.0.1 with a free port
# and temporary storage (internal/harness/registry.go); the package's own service, which
# would listen on :5000 with storage under /var/lib, is kept disabled and stopped.
# The tests' other tools (ldd, chroot) come with every Debian (libc-bin, coreutils).
# Idempotent: a second run changes nothing.
set -euo pipefail

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else echo "install.sh: need root (or sudo) to run: $*" >&2; exit 1
  fi
}

if [ ! -x /usr/bin/docker-registry ]; then
  # Keep the package's init script from starting a registry during the install; a policy the
  # machine already has (containers often ship one) is left as it is.
  policy_made=
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    as_root sh -c 'printf "#!/bin/sh\nexit 101\n" > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d'
    policy_made=1
  fi
  cleanup() { if [ -n "$policy_made" ]; then as_root rm -f /usr/sbin/policy-rc.d; fi; }
  trap cleanup EXIT
  export DEBIAN_FRONTEND=noninteractive
  if ! as_root apt-get install -y --no-install-recommends docker-registry; then
    as_root apt-get update
    as_root apt-get install -y --no-install-recommends docker-registry
  fi
fi

# The package's service is not ours: stop it if it runs, and keep it from starting at boot.
if [ -d /run/systemd/system ] && systemctl is-active --quiet docker-registry.service 2>/dev/null; then
  as_root systemctl stop docker-registry.service
elif [ -x /etc/init.d/docker-registry ] && /etc/init.d/docker-registry status >/dev/null 2>&1; then
  as_root /etc/init.d/docker-registry stop
fi
if command -v systemctl >/dev/null 2>&1 && systemctl is-enabled --quiet docker-registry.service 2>/dev/null; then
  as_root systemctl disable docker-registry.service # works without a running systemd too
fi
if ls /etc/rc[2-5].d/S*docker-registry >/dev/null 2>&1; then
  as_root update-rc.d docker-registry disable >/dev/null
fi

/usr/bin/docker-registry --version
