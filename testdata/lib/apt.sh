# Sourced by the install scripts under testdata/: how they install Debian's packages.
#   source "$(dirname "${BASH_SOURCE[0]}")/../lib/apt.sh"
#   apt_ensure skopeo umoci        # installs those of them not installed yet
# The caller sets `set -euo pipefail`; nothing here starts a service.

# as_root runs its words as root: directly when root, else through sudo.
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else echo "$(basename "$0"): need root (or sudo) to run: $*" >&2; exit 1
  fi
}

# apt_ensure installs, without recommends, those of the named packages that are not installed.
# A package's maintainer scripts are kept from starting its services (a policy-rc.d that says
# no, removed afterwards; a policy the machine already has is left as it is). apt's lists are
# updated only when the install fails without it.
apt_ensure() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  apt_policy_made=
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    as_root sh -c 'printf "#!/bin/sh\nexit 101\n" > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d'
    apt_policy_made=1
  fi
  trap 'if [ -n "$apt_policy_made" ]; then as_root rm -f /usr/sbin/policy-rc.d; fi' EXIT
  if ! as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"; then
    as_root apt-get update
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
  fi
  if [ -n "$apt_policy_made" ]; then as_root rm -f /usr/sbin/policy-rc.d; fi
  apt_policy_made=
}
