#!/usr/bin/env bash
# Bootstrap the hpcfabric development / CI environment.
#
# Idempotent: safe to run repeatedly and from any directory. A second run on a
# ready machine makes no apt and no pip call.
#
#   scripts/bootstrap.sh            apt packages + .venv + pip install + OVS
#   scripts/bootstrap.sh --no-ovs   skip starting Open vSwitch (pure unit tests)
#   scripts/bootstrap.sh --ovs-only only make sure OVS is installed and running
#   scripts/bootstrap.sh --etcd     also etcd (Debian etcd-server 3.4, not started) + etcd3gw (docs/ha.md)
#   scripts/bootstrap.sh --ryu      also the Ryu venv .venv-ryu (ryu-manager; make test uses it)
#   scripts/bootstrap.sh --prometheus  also Debian prometheus 2.42 + promtool (not started; mininet/prom_server.py)
#   scripts/bootstrap.sh --browser     also Debian chromium + chromium-driver (the fabric page's browser test)
#
# Environment:
#   BOOTSTRAP_FORCE_PIP=1   reinstall Python packages even if the stamp is fresh
set -euo pipefail

log() { printf '[bootstrap] %s\n' "$*"; }
die() { printf '[bootstrap] ERROR: %s\n' "$*" >&2; exit 1; }

usage() {
    sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
}

DO_OVS=1
DO_PY=1
DO_APT=1
DO_ETCD=0
DO_RYU=0
DO_PROM=0
DO_BROWSER=0
for arg in "$@"; do
    case "$arg" in
        --no-ovs)   DO_OVS=0 ;;
        --ryu)      DO_RYU=1 ;;
        --ovs-only) DO_PY=0 ;;
        --etcd)     DO_ETCD=1 ;;
        --prometheus) DO_PROM=1 ;;
        --browser)  DO_BROWSER=1 ;;
        -h|--help)  usage; exit 0 ;;
        *)          usage >&2; die "unknown option: $arg" ;;
    esac
done
if [[ $DO_OVS -eq 0 && $DO_PY -eq 0 ]]; then
    die "--no-ovs and --ovs-only are mutually exclusive"
fi

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

VENV="$ROOT/.venv"
SYS_PY=/usr/bin/python3
STAMP="$VENV/.hpcfabric-bootstrap.stamp"
OVS_CTL=/usr/share/openvswitch/scripts/ovs-ctl

# Debian packages. Mininet from Debian is only importable from a venv created
# by Debian's python with --system-site-packages (see below).
# g++ make flex bison: BookSim2, the simulator's peer, built by tests/test_booksim_peer.py (../shared/booksim/build.sh)
# python3-cryptography: the test and bench certificates (hpcfabric/emu/pki.py; ovs-pki comes with Open vSwitch)
APT_PKGS=(openvswitch-switch mininet iperf3 iputils-ping fping python3-venv ethtool tcpdump iproute2 procps
          g++ make flex bison python3-cryptography)
if [[ $DO_PY -eq 0 ]]; then
    APT_PKGS=(openvswitch-switch)
fi
# --etcd: the HA tests start their own 3-member cluster; the Debian service stays off (no systemd here).
[[ $DO_ETCD -eq 1 ]] && APT_PKGS+=(etcd-server)
# --prometheus: the monitoring test starts its own server (mininet/prom_server.py: free port, own data dir);
# the Debian service is not used (docs/operations.md, "Monitoring").
[[ $DO_PROM -eq 1 ]] && APT_PKGS+=(prometheus)
# --browser: the fabric page's browser test (selenium drives Debian's Chromium; no browser download)
[[ $DO_BROWSER -eq 1 ]] && APT_PKGS+=(chromium chromium-driver)
# Extra PyPI packages installed on top of setup.py's '.[controller,test,dask]'.
# Editing this list (i.e. this file) triggers a reinstall on the next run.
PIP_EXTRA=(prometheus_client)

SUDO=""
if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null 2>&1 || die "not root and sudo is not available"
    SUDO="sudo"
fi

# --------------------------------------------------------------------------
# 1. apt packages (only when something is missing)
# --------------------------------------------------------------------------
pkg_installed() {
    [[ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null || true)" == "installed" ]]
}

missing=()
for p in "${APT_PKGS[@]}"; do
    pkg_installed "$p" || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
    command -v apt-get >/dev/null 2>&1 || die "missing packages (${missing[*]}) and no apt-get"
    log "installing apt packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get -o DPkg::Lock::Timeout=300 update -qq >/dev/null || die "apt-get update failed"
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq \
        --no-install-recommends "${missing[@]}" >/dev/null \
        || die "apt-get install ${missing[*]} failed"
    for p in "${missing[@]}"; do
        pkg_installed "$p" || die "package $p still not installed after apt-get"
    done
else
    log "apt packages present"
fi

# --------------------------------------------------------------------------
# 2. virtualenv + Python packages
# --------------------------------------------------------------------------
if [[ $DO_PY -eq 1 ]]; then
    [[ -x $SYS_PY ]] || die "$SYS_PY not found (Debian python3 is required for mininet)"
    if [[ ! -x "$VENV/bin/python" ]]; then
        log "creating $VENV (system site packages, $SYS_PY)"
        rm -rf "$VENV"
        "$SYS_PY" -m venv --system-site-packages "$VENV" || die "venv creation failed"
        rm -f "$STAMP"
        # Debian's bundled pip (23.0) does legacy 'setup.py develop' editable
        # installs; a current pip does PEP 660 ones (metadata in site-packages).
        log "upgrading pip in $VENV"
        "$VENV/bin/python" -m pip --disable-pip-version-check -q install --upgrade pip \
            >/dev/null 2>&1 || die "pip upgrade failed"
    fi

    need_pip=0
    if [[ ${BOOTSTRAP_FORCE_PIP:-0} == 1 || ! -f $STAMP ]]; then
        need_pip=1
    elif [[ setup.py -nt $STAMP || $ROOT/scripts/bootstrap.sh -nt $STAMP ]]; then
        need_pip=1
    elif [[ -f pyproject.toml && pyproject.toml -nt $STAMP ]]; then
        need_pip=1
    elif ! "$VENV/bin/python" -c 'import importlib.metadata as m; m.version("hpcfabric")' \
            >/dev/null 2>&1; then
        need_pip=1   # editable install lost its metadata (e.g. egg-info removed)
    fi

    if [[ $need_pip -eq 1 ]]; then
        [[ -f setup.py ]] || die "setup.py not found in $ROOT"
        log "pip install -e '.[controller,test,dask]' ${PIP_EXTRA[*]:-}"
        PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
        pip_log="$VENV/pip-install.log"
        if ! "${PIP[@]}" install -e '.[controller,test,dask]' ${PIP_EXTRA[@]+"${PIP_EXTRA[@]}"} \
                >"$pip_log" 2>&1; then
            tail -n 40 "$pip_log" >&2
            die "pip install failed (full log: $pip_log)"
        fi
        touch "$STAMP"
    else
        log "python packages up to date (stamp newer than setup.py)"
    fi
    if [[ $DO_ETCD -eq 1 ]] && ! "$VENV/bin/python" -c 'import etcd3gw' >/dev/null 2>&1; then
        log "pip install etcd3gw (the etcd HA backend's client)"
        "$VENV/bin/python" -m pip --disable-pip-version-check -q install 'etcd3gw>=2.4' >/dev/null \
            || die "pip install etcd3gw failed"
    fi

    # Sanity check: mininet (Debian, system site) + os_ken importable, and our
    # package resolvable (not imported: a broken module is pytest's business).
    "$VENV/bin/python" - <<'PYEOF' || die "import check failed (see above)"
import importlib.util, sys
import mininet.net, os_ken  # noqa: F401
if importlib.util.find_spec("hpcfabric") is None:
    sys.exit("hpcfabric is not installed in the venv")
PYEOF
fi

# --------------------------------------------------------------------------
# 2b. the Ryu venv (--ryu): ryu-manager from csle-ryu-fork 4.37.dev
# --------------------------------------------------------------------------
# csle-ryu-fork needs eventlet==0.33.2 and dnspython<2.3; in .venv that would
# downgrade os-ken's eventlet (0.41) and dnspython (2.9), so Ryu gets its own
# venv (docs/controller.md, "os-ken and Ryu"). Same stamp logic as .venv.
RYU_VENV="$ROOT/.venv-ryu"
RYU_STAMP="$RYU_VENV/.hpcfabric-bootstrap.stamp"
RYU_PKGS=(csle-ryu-fork==4.37.0.dev3357 eventlet==0.33.2 'dnspython<2.3' prometheus_client)
if [[ $DO_PY -eq 1 && $DO_RYU -eq 1 ]]; then
    if [[ ! -x "$RYU_VENV/bin/python" ]]; then
        log "creating $RYU_VENV (Ryu: system site packages, $SYS_PY)"
        rm -rf "$RYU_VENV"
        "$SYS_PY" -m venv --system-site-packages "$RYU_VENV" || die "venv creation failed ($RYU_VENV)"
        rm -f "$RYU_STAMP"
        "$RYU_VENV/bin/python" -m pip --disable-pip-version-check -q install --upgrade pip \
            >/dev/null 2>&1 || die "pip upgrade failed ($RYU_VENV)"
    fi
    if [[ ${BOOTSTRAP_FORCE_PIP:-0} == 1 || ! -f $RYU_STAMP || setup.py -nt $RYU_STAMP \
            || $ROOT/scripts/bootstrap.sh -nt $RYU_STAMP || ! -x $RYU_VENV/bin/ryu-manager ]]; then
        log "pip install -e . ${RYU_PKGS[*]} into $RYU_VENV"
        if ! "$RYU_VENV/bin/python" -m pip --disable-pip-version-check -q install -e . "${RYU_PKGS[@]}" \
                >"$RYU_VENV/pip-install.log" 2>&1; then
            tail -n 40 "$RYU_VENV/pip-install.log" >&2
            die "pip install into $RYU_VENV failed (full log: $RYU_VENV/pip-install.log)"
        fi
        touch "$RYU_STAMP"
    else
        log "Ryu venv up to date"
    fi
    "$RYU_VENV/bin/python" -c 'import eventlet, ryu, mininet.net; assert eventlet.__version__ == "0.33.2", eventlet.__version__' \
        || die "Ryu venv check failed ($RYU_VENV)"
fi

# --------------------------------------------------------------------------
# 3. Open vSwitch (userspace datapath: the kernel has no openvswitch module)
# --------------------------------------------------------------------------
ovs_ok() { $SUDO timeout 10 ovs-vsctl --timeout=5 show >/dev/null 2>&1; }

# Userspace OVS sends on every netdev-linux port through ONE AF_PACKET socket,
# created at its first send with the then net.core.wmem_default as its send
# buffer. Frames waiting in the experiments' link shapers (mininet/lossless.py)
# are charged to that buffer: with the kernel default (208 KiB) a few full
# queues make every other send fail silently; frames waiting in OVS's receive
# queues count too (veth keeps the sender as owner). 64 MiB: ~900 full 30-KB
# queues (1-KB frames). Raised (never lowered) before OVS starts; docs/experiments.md.
OVS_SNDBUF=67108864
ovs_sndbuf() {  # send buffer of ovs-vswitchd's unbound AF_PACKET socket (0: none yet)
    ss -0 -m -p 2>/dev/null | awk '/ovs-vswitchd/ && $4 ~ /^\[0\]/ { if (match($0, /tb[0-9]+/)) { print substr($0, RSTART + 2, RLENGTH - 2); exit } }'
}
if [[ $DO_OVS -eq 1 ]]; then
    cur=$(sysctl -n net.core.wmem_default 2>/dev/null || echo 0)
    if (( cur < OVS_SNDBUF )); then
        log "raising net.core.wmem_default $cur -> $OVS_SNDBUF (Open vSwitch's send socket, see docs/experiments.md)"
        $SUDO sysctl -qw net.core.wmem_default=$OVS_SNDBUF || die "sysctl net.core.wmem_default failed"
    fi
    (( $(sysctl -n net.core.wmem_max 2>/dev/null || echo 0) >= OVS_SNDBUF )) || $SUDO sysctl -qw net.core.wmem_max=$OVS_SNDBUF
    if ovs_ok; then
        tb=$(ovs_sndbuf)
        if [[ -n $tb ]] && (( tb < OVS_SNDBUF )); then
            if [[ -z $($SUDO ovs-vsctl list-br 2>/dev/null) ]]; then
                log "restarting Open vSwitch: its send socket buffer is $tb bytes (< $OVS_SNDBUF) and no bridge exists"
                $SUDO "$OVS_CTL" stop >/dev/null 2>&1 3>&- 4>&- 5>&- 6>&- 7>&- 8>&- 9>&- || true
            else
                log "WARNING: Open vSwitch's send socket buffer is $tb bytes (< $OVS_SNDBUF); bridges exist, so it is" \
                    "not restarted: the lossless-link experiments need a restart (delete the bridges, rerun make setup)"
            fi
        fi
    fi
    if ovs_ok; then
        log "Open vSwitch running"
    else
        [[ -x $OVS_CTL ]] || die "$OVS_CTL not found (is openvswitch-switch installed?)"
        log "starting Open vSwitch (ovs-ctl, userspace datapath)"
        # fds 3-9 closed: the daemons must not inherit e.g. a caller's flock(1) lock
        out=$($SUDO "$OVS_CTL" start --system-id=random --no-monitor 2>&1 3>&- 4>&- 5>&- 6>&- 7>&- 8>&- 9>&-) || {
            printf '%s\n' "$out" >&2
            die "ovs-ctl start failed"
        }
        for _ in $(seq 1 20); do
            ovs_ok && break
            sleep 0.5
        done
        ovs_ok || { printf '%s\n' "$out" >&2; die "OVS started but 'ovs-vsctl show' still fails"; }
        log "Open vSwitch started"
    fi
fi

log "done"
