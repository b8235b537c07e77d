#!/usr/bin/env bash
# A single-node Kubernetes on this machine, built from pinned sources only
# (the Go module proxy and Debian's archive), for the cluster tests
# (e2e/cluster_test.go) and the cluster bench. Everything listens on
# 127.0.0.1 and the pods' bridge never reaches the uplink (a mangle rule
# drops any packet to or from the pod and service ranges leaving it).
#
#   scripts/k8s-local.sh build    build (or find cached) binaries, print their dir
#   scripts/k8s-local.sh up       build, start the cluster, import the images
#   scripts/k8s-local.sh status   what runs, and `kubectl get nodes,pods -A`
#   scripts/k8s-local.sh down     stop everything, undo what up changed on the host
#   scripts/k8s-local.sh env      print the exports the cluster tests read (KUBECONFIG,
#                                 TOOLGATE_K8S_ROOT, TOOLGATE_K8S_BIN)
#
# Pieces (shared/K8S.md has what each needed on a hybrid-cgroup host):
#   Kubernetes v1.37.2     one multi-call binary (kube-apiserver, -controller-manager,
#                          -scheduler, kubelet, kube-proxy, kubectl): one link, not six
#   containerd v2.4.2      + containerd-shim-runc-v2 and ctr (CGO off)
#   runc v1.5.3            CGO on, seccomp (idmapped mounts for hostUsers: false)
#   etcd                   Debian's etcd-server .deb, unpacked (apt-get download, dpkg -x)
#   CNI                    Debian's containernetworking-plugins (bridge, host-local, loopback)
#   pause image            a static Go binary FROM scratch, built here
# No CoreDNS (no image without a registry): pods use the host's resolv.conf.
# No NetworkPolicy enforcer: kube-router v2.1.0 has reported security flaws,
# and sigs.k8s.io/kube-network-policies (v0.8.0) hands packets to its
# evaluator with the nftables queue expression, which needs a kernel with
# CONFIG_NFT_QUEUE (this machine's 6.18 has it unset), and sees pod-to-pod
# traffic only where it is routed (a bridge CNI switches it): the
# NetworkPolicy is accepted by the API server and not enforced.
#
# Binaries are cached outside the checkout in
# ${TOOLGATE_K8S_CACHE:-/var/cache/toolgate-k8s}/<hash of the versions and
# recipes>/bin, so a warm machine skips the build. The cluster's state lives
# in ${TOOLGATE_K8S_ROOT:-/var/lib/toolgate-k8s} (removed by down).
# TOOLGATE_K8S_IMAGES: images imported into containerd by up (default
# localhost/toolgate:dev; each must exist in podman).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

k8s_version=v1.37.2
k8s_staging=v0.37.2
containerd_version=v2.4.2
runc_version=v1.5.3
etcd_deb=etcd-server
cache_root=${TOOLGATE_K8S_CACHE:-/var/cache/toolgate-k8s}
root=${TOOLGATE_K8S_ROOT:-/var/lib/toolgate-k8s}
images=${TOOLGATE_K8S_IMAGES:-localhost/toolgate:dev}
pod_cidr=10.244.0.0/16
node_cidr=10.244.0.0/24
svc_cidr=10.96.0.0/16
pause_image=localhost/toolgate-pause:1

log() { echo "k8s-local: $*" >&2; }

# The multi-call main: dispatches on the name it was run as (a symlink per
# component) or on its first argument, to each component's own cobra
# command, with the blank imports each component's main has.
hyperkube_main='package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/client-go/plugin/pkg/client/auth"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	kubectl "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
	_ "time/tzdata"
)

var commands = map[string]func() *cobra.Command{
	"kube-apiserver":          apiserver.NewAPIServerCommand,
	"kube-controller-manager": controllermanager.NewControllerManagerCommand,
	"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
	"kubelet":                 func() *cobra.Command { return kubelet.NewKubeletCommand(context.Background()) },
	"kube-proxy":              proxy.NewProxyCommand,
}

func main() {
	name := filepath.Base(os.Args[0])
	if _, ok := commands[name]; !ok && name != "kubectl" && len(os.Args) > 1 {
		name = os.Args[1]
		os.Args = os.Args[1:]
	}
	if name == "kubectl" {
		logs.GlogSetter(kubectl.GetLogVerbosity(os.Args)) //nolint:errcheck
		if err := cli.RunNoErrOutput(kubectl.NewDefaultKubectlCommand()); err != nil {
			kubectlutil.CheckErr(err)
		}
		return
	}
	newCmd, ok := commands[name]
	if !ok {
		fmt.Fprintln(os.Stderr, "usage: hyperkube kube-apiserver|kube-controller-manager|kube-scheduler|kubelet|kube-proxy|kubectl ...")
		os.Exit(2)
	}
	os.Exit(cli.Run(newCmd()))
}
'

# The pause container: blocks until a signal, reaps orphans.
pause_main='package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
'

# The cache key: every version and recipe that goes into the binaries.
recipe_hash() {
	{
		echo "$k8s_version $k8s_staging $containerd_version $runc_version"
		apt-cache policy "$etcd_deb" 2>/dev/null | sed -n 's/^  Candidate: //p'
		go version
		printf '%s' "$hyperkube_main" "$pause_main"
		declare -f build_k8s build_containerd build_runc build_etcd build_pause
	} | sha256sum | cut -c1-16
}

# gobuild_module DIR MODULE@VERSION: a throwaway module in DIR requiring it.
gobuild_module() {
	local dir=$1 req=$2
	rm -rf "$dir"
	mkdir -p "$dir"
	(cd "$dir" && go mod init toolgate.local/k8s-build >/dev/null 2>&1 && go mod edit -require="$req")
}

build_k8s() {
	local out=$1 src=$2/k8s mod replaces=() m
	gobuild_module "$src" "k8s.io/kubernetes@$k8s_version"
	mod=$(cd "$src" && go mod download -json "k8s.io/kubernetes@$k8s_version" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
	# Each staging replace of k8s.io/kubernetes's go.mod, to its release.
	while read -r m; do replaces+=("-replace=$m=$m@$k8s_staging"); done < <(
		sed -n 's#^\t\(k8s\.io/[a-z0-9-]*\) => \./staging/src/.*#\1#p' "$mod" | grep -v '^k8s.io/sample-')
	(cd "$src" && go mod edit "${replaces[@]}")
	printf '%s' "$hyperkube_main" >"$src/main.go"
	(cd "$src" && go mod tidy >&2)
	local v=k8s.io/component-base/version minor=${k8s_version#v1.}
	minor=${minor%%.*}
	(cd "$src" && CGO_ENABLED=0 go build -trimpath -o "$out/hyperkube" \
		-ldflags "-s -w -X $v.gitVersion=$k8s_version -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean -X $v.buildDate=1970-01-01T00:00:00Z" .)
	for m in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl; do
		ln -sf hyperkube "$out/$m"
	done
}

build_containerd() {
	local out=$1 src=$2/containerd
	gobuild_module "$src" "github.com/containerd/containerd/v2@$containerd_version"
	printf '//go:build tools\n\npackage tools\n\nimport (\n\t_ "github.com/containerd/containerd/v2/cmd/containerd"\n\t_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"\n\t_ "github.com/containerd/containerd/v2/cmd/ctr"\n)\n' >"$src/tools.go"
	(cd "$src" && go mod tidy >&2)
	local v=github.com/containerd/containerd/v2/version
	(cd "$src" && CGO_ENABLED=0 go build -trimpath -tags 'no_btrfs urfave_cli_no_docs' -o "$out/" \
		-ldflags "-s -w -X $v.Version=$containerd_version -X $v.Revision=$containerd_version" \
		github.com/containerd/containerd/v2/cmd/containerd \
		github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
		github.com/containerd/containerd/v2/cmd/ctr)
}

build_runc() {
	local out=$1 src=$2/runc
	gobuild_module "$src" "github.com/opencontainers/runc@$runc_version"
	printf '//go:build tools\n\npackage tools\n\nimport _ "github.com/opencontainers/runc"\n' >"$src/tools.go"
	(cd "$src" && go mod tidy >&2)
	(cd "$src" && CGO_ENABLED=1 go build -trimpath -tags seccomp -o "$out/runc" \
		-ldflags "-s -w -X main.version=${runc_version#v}" github.com/opencontainers/runc)
}

build_etcd() {
	local out=$1 src=$2/etcd deb
	rm -rf "$src"
	mkdir -p "$src"
	(cd "$src" && apt-get download -qq "$etcd_deb" >&2)
	deb=$(ls "$src"/*.deb)
	dpkg -x "$deb" "$src/x"
	cp "$src/x/usr/bin/etcd" "$out/etcd"
}

build_pause() {
	local out=$1 src=$2/pause
	rm -rf "$src"
	mkdir -p "$src"
	printf '%s' "$pause_main" >"$src/main.go"
	(cd "$src" && go mod init toolgate.local/pause >/dev/null 2>&1 &&
		CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/pause" .)
}

# bin_dir: the cached binaries' directory, built first when absent.
bin_dir() {
	go_path
	apt_ensure k8s-local gcc:gcc pkg-config:pkg-config /usr/include/seccomp.h:libseccomp-dev \
		/usr/lib/cni/bridge:containernetworking-plugins iptables:iptables conntrack:conntrack \
		nft:nftables ip:iproute2 socat:socat
	local hash dir src t0 step
	hash=$(recipe_hash)
	dir=$cache_root/$hash
	if [ -f "$dir/done" ]; then
		log "binaries cached in $dir/bin"
		printf '%s\n' "$dir/bin"
		return 0
	fi
	mkdir -p "$dir/bin"
	src=$cache_root/src
	t0=$(date +%s)
	for step in etcd pause runc containerd k8s; do
		[ ! -f "$dir/done-$step" ] || continue
		local s0
		s0=$(date +%s)
		log "building $step"
		"build_$step" "$dir/bin" "$src"
		touch "$dir/done-$step"
		log "built $step in $(($(date +%s) - s0)) s"
	done
	touch "$dir/done"
	log "binaries built in $(($(date +%s) - t0)) s into $dir/bin"
	printf '%s\n' "$dir/bin"
}

# ---- the cluster ----------------------------------------------------------

pki=$root/pki
run=$root/run
logs=$root/log
sock=$run/containerd/containerd.sock
export KUBECONFIG=$root/admin.kubeconfig

# cgroup_layout: v2 (one unified hierarchy) or v1 (v1 controllers, with or
# without an empty cgroup2 "unified" beside them), detected.
cgroup_layout() {
	if [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; then echo v2; else echo v1; fi
}

# cgroup_driver: systemd when systemd is the init, else cgroupfs.
cgroup_driver() {
	if [ -d /run/systemd/system ]; then echo systemd; else echo cgroupfs; fi
}

uplink() { ip -4 route show default | awk '{for (i = 1; i < NF; i++) if ($i == "dev") {print $(i + 1); exit}}'; }

host_ip() { ip -4 -o addr show dev "$(uplink)" | awk '{split($4, a, "/"); print a[1]; exit}'; }

make_pki() {
	[ ! -f "$pki/admin.crt" ] || return 0
	mkdir -p "$pki"
	(
		cd "$pki"
		umask 077
		openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj /CN=toolgate-k8s-ca \
			-keyout ca.key -out ca.crt 2>/dev/null
		openssl genrsa -out sa.key 2048 2>/dev/null
		openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
		printf 'subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc\n' >san.ext
		local name subj ext
		for name in apiserver admin; do
			subj=/CN=kube-apiserver ext=(-extfile san.ext)
			if [ "$name" = admin ]; then subj=/O=system:masters/CN=toolgate-k8s-admin ext=(); fi
			openssl req -newkey rsa:2048 -nodes -subj "$subj" -keyout "$name.key" -out "$name.csr" 2>/dev/null
			openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
				"${ext[@]}" -out "$name.crt" 2>/dev/null
		done
	)
	"$bin/kubectl" config set-cluster local --server=https://127.0.0.1:6443 \
		--certificate-authority="$pki/ca.crt" --embed-certs >/dev/null
	"$bin/kubectl" config set-credentials admin --client-certificate="$pki/admin.crt" \
		--client-key="$pki/admin.key" --embed-certs >/dev/null
	"$bin/kubectl" config set-context local --cluster=local --user=admin >/dev/null
	"$bin/kubectl" config use-context local >/dev/null
}

# start NAME CMD...: run CMD in its own session, log to $logs/NAME.log.
start() {
	local name=$1
	shift
	setsid "$@" >"$logs/$name.log" 2>&1 </dev/null &
	echo $! >"$run/$name.pid"
}

# wait_for WHAT SECONDS CMD...: until CMD succeeds.
wait_for() {
	local what=$1 n=$2 i
	shift 2
	for ((i = 0; i < n * 2; i++)); do
		if "$@" >/dev/null 2>&1; then return 0; fi
		sleep 0.5
	done
	log "$what not ready after $n s; last lines of the logs:"
	tail -n 15 "$logs"/*.log >&2 || true
	return 1
}

# gates COMPONENT GATE...: the --feature-gates value with each GATE=true
# that COMPONENT still knows (a gate that graduated and was removed is an
# error there; one that is locked on is only a warning).
gates() {
	local c=$1 g out=()
	shift
	local help
	help=$("$bin/$c" --help 2>&1 || true)
	for g; do
		if grep -q "$g=true|false" <<<"$help" && ! grep -q "$g=true|false (.*GA" <<<"$help"; then out+=("$g=true"); fi
	done
	(
		IFS=,
		echo "${out[*]}"
	)
}

write_configs() {
	local layout driver systemd=false
	layout=$(cgroup_layout)
	driver=$(cgroup_driver)
	[ "$driver" = cgroupfs ] || systemd=true
	mkdir -p "$root/cni/net.d" "$root/etc"
	cat >"$root/cni/net.d/10-toolgate.conflist" <<JSON
{"cniVersion": "1.0.0", "name": "toolgate-k8s", "plugins": [
  {"type": "bridge", "bridge": "tgk8s0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$root/cni/ipam", "ranges": [[{"subnet": "$node_cidr"}]],
            "routes": [{"dst": "0.0.0.0/0"}]}}]}
JSON
	cat >"$root/etc/containerd.toml" <<TOML
version = 3
root = "$root/containerd"
state = "$run/containerd"
[grpc]
  address = "$sock"
[ttrpc]
  address = "$run/containerd/containerd.sock.ttrpc"
[debug]
  address = "$run/containerd/debug.sock"
[plugins.'io.containerd.internal.v1.opt']
  path = "$root/opt"
[plugins.'io.containerd.image-verifier.v1.bindir']
  bin_dir = "$root/image-verifier"
[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = "$pause_image"
[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "$bin/runc"
        Root = "$run/runc"
        SystemdCgroup = $systemd
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "$root/cni/net.d"
[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
TOML
	local kgates
	kgates=$(gates kubelet UserNamespacesSupport ProcMountType)
	cat >"$root/etc/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
cgroupDriver: $driver
$([ "$layout" = v2 ] || echo "failCgroupV1: false")
failSwapOn: false
oomScoreAdj: 0
protectKernelDefaults: true
containerRuntimeEndpoint: unix://$sock
volumePluginDir: $root/kubelet-plugins
podLogsDir: $root/pod-logs
podPidsLimit: ${TOOLGATE_K8S_POD_PIDS:-4096}
# ConfigMap and Secret edits reach the volumes within this (default 1m).
syncFrequency: 10s
resolvConf: /etc/resolv.conf
imageGCHighThresholdPercent: 100
evictionHard: {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"}
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: AlwaysAllow}
$([ -z "$kgates" ] || echo "featureGates: {$(sed 's/=true/: true/g; s/,/, /g' <<<"$kgates")}")
YAML
	local new=$root/etc/kube-proxy.yaml.new
	cat >"$new" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $KUBECONFIG}
mode: iptables
bindAddress: 127.0.0.1
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
clusterCIDR: $pod_cidr
hostnameOverride: localhost
iptables: {localhostNodePorts: false}
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
YAML
	# kube-proxy exits when its config file is rewritten: only when it changes.
	if cmp -s "$new" "$root/etc/kube-proxy.yaml"; then rm "$new"; else mv "$new" "$root/etc/kube-proxy.yaml"; fi
}

# host_changes: record what up changes outside $root, once, so that down
# puts it back (sysctls, directories it creates, nft tables).
sysctls=(vm.overcommit_memory=1 vm.panic_on_oom=0 kernel.panic=10 kernel.panic_on_oops=1)
host_changes() {
	local saved=$root/host.saved kv d
	[ ! -f "$saved" ] || return 0
	{
		for kv in "${sysctls[@]}" net.ipv4.ip_forward=; do echo "sysctl ${kv%%=*}=$(sysctl -n "${kv%%=*}")"; done
		for d in /var/lib/kubelet /var/log/containers /run/containerd; do [ -e "$d" ] || echo "created $d"; done
		nft list tables 2>/dev/null | sed 's/^/nft /'
		if ! kube_chains | grep -q .; then echo "kubechains none"; fi
	} >"$saved.tmp"
	mv "$saved.tmp" "$saved"
}

noleak_rules() {
	local op=$1 up cidr dir
	up=$(uplink)
	[ -n "$up" ] || return 0
	for cidr in "$pod_cidr" "$svc_cidr"; do
		for dir in -s -d; do
			if [ "$op" = -A ]; then
				iptables -t mangle -C POSTROUTING -o "$up" "$dir" "$cidr" -m comment --comment toolgate-k8s-noleak -j DROP 2>/dev/null ||
					iptables -t mangle -A POSTROUTING -o "$up" "$dir" "$cidr" -m comment --comment toolgate-k8s-noleak -j DROP
			else
				while iptables -t mangle -D POSTROUTING -o "$up" "$dir" "$cidr" -m comment --comment toolgate-k8s-noleak -j DROP 2>/dev/null; do :; done
			fi
		done
	done
}

running() { [ -f "$run/$1.pid" ] && kill -0 "$(cat "$run/$1.pid")" 2>/dev/null; }

apiserver_ready() { "$bin/kubectl" get --raw /readyz; }

cmd_up() {
	local t0
	t0=$(date +%s)
	bin=$(bin_dir)
	export PATH="$bin:$PATH"
	mkdir -p "$root" "$run" "$logs"
	host_changes
	make_pki
	write_configs
	local kv
	for kv in "${sysctls[@]}"; do sysctl -qw "$kv"; done
	noleak_rules -A
	local t1 hip
	t1=$(date +%s)
	hip=$(host_ip)
	running etcd || start etcd "$bin/etcd" --name toolgate-k8s --data-dir "$root/etcd" \
		--listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
		--listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
		--initial-cluster toolgate-k8s=http://127.0.0.1:2380 --listen-metrics-urls http://127.0.0.1:2381
	running kube-apiserver || start kube-apiserver "$bin/kube-apiserver" --bind-address=127.0.0.1 --secure-port=6443 \
		--advertise-address="${hip:-127.0.0.1}" --etcd-servers=http://127.0.0.1:2379 \
		--client-ca-file="$pki/ca.crt" --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
		--kubelet-client-certificate="$pki/admin.crt" --kubelet-client-key="$pki/admin.key" \
		--kubelet-preferred-address-types=Hostname,InternalIP \
		--service-account-issuer=https://kubernetes.default.svc --service-account-key-file="$pki/sa.pub" \
		--service-account-signing-key-file="$pki/sa.key" --service-cluster-ip-range="$svc_cidr" \
		--authorization-mode=Node,RBAC --allow-privileged=false \
		--feature-gates="$(gates kube-apiserver UserNamespacesSupport ProcMountType)"
	wait_for kube-apiserver 120 apiserver_ready
	running kube-controller-manager || start kube-controller-manager "$bin/kube-controller-manager" \
		--kubeconfig="$KUBECONFIG" --bind-address=127.0.0.1 --leader-elect=false \
		--allocate-node-cidrs --cluster-cidr="$pod_cidr" --node-cidr-mask-size=24 --service-cluster-ip-range="$svc_cidr" \
		--service-account-private-key-file="$pki/sa.key" --root-ca-file="$pki/ca.crt" \
		--flex-volume-plugin-dir="$root/flex" --controllers='*,-bootstrapsigner,-tokencleaner'
	running kube-scheduler || start kube-scheduler "$bin/kube-scheduler" --kubeconfig="$KUBECONFIG" \
		--bind-address=127.0.0.1 --leader-elect=false
	running containerd || start containerd "$bin/containerd" --config "$root/etc/containerd.toml"
	wait_for containerd 60 "$bin/ctr" -a "$sock" version
	import_images
	running kubelet || start kubelet "$bin/kubelet" --config="$root/etc/kubelet.yaml" --kubeconfig="$KUBECONFIG" \
		--root-dir="$root/kubelet" --hostname-override=localhost --cert-dir="$root/kubelet-pki"
	running kube-proxy || start kube-proxy "$bin/kube-proxy" --config="$root/etc/kube-proxy.yaml"
	wait_for "node localhost" 120 "$bin/kubectl" wait --for=condition=Ready node/localhost --timeout=1s
	wait_for "default service account" 60 "$bin/kubectl" get serviceaccount default
	log "cluster up in $(($(date +%s) - t0)) s (start $(($(date +%s) - t1)) s); export KUBECONFIG=$KUBECONFIG PATH=$bin:\$PATH"
}

# quiet_ctr: ctr's stderr without containerd's cgroup v1 deprecation notice
# (one per command on a v1 host).
quiet_ctr() { grep -v 'DEPRECATION: The support for cgroup v1' >&2 || true; }

# import_images: the pause image (built here, FROM scratch) and each of
# $images from podman, into containerd's k8s.io namespace.
import_images() {
	. scripts/podman.sh
	podman_env
	local ctx img
	if ! "$bin/ctr" -a "$sock" -n k8s.io images ls -q | grep -qx "$pause_image"; then
		ctx=$(mktemp -d)
		cp "$bin/pause" "$ctx/pause"
		printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' >"$ctx/Containerfile"
		podman build --quiet -t "$pause_image" "$ctx" >/dev/null
		rm -rf "$ctx"
		podman save --format docker-archive "$pause_image" | "$bin/ctr" -a "$sock" -n k8s.io images import - 2>&1 >/dev/null | quiet_ctr
	fi
	for img in $images; do
		if ! podman image exists "$img"; then
			log "image $img not in podman (build it with scripts/image.sh): not imported"
			continue
		fi
		podman save --format docker-archive "$img" | "$bin/ctr" -a "$sock" -n k8s.io images import - 2>&1 >/dev/null | quiet_ctr
		log "imported $img"
	done
}

# stop NAME: TERM, then KILL after 10 s, the process up started.
stop() {
	local name=$1 pid i
	[ -f "$run/$name.pid" ] || return 0
	pid=$(cat "$run/$name.pid")
	if kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null || true
		for ((i = 0; i < 20; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.5
		done
		kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -f "$run/$name.pid"
}

cmd_down() {
	local t0 bin
	t0=$(date +%s)
	[ -d "$root" ] || {
		log "nothing to take down ($root absent)"
		return 0
	}
	bin=$cache_root/$(recipe_hash)/bin
	if [ -x "$bin/kubectl" ] && running kube-apiserver && running kubelet; then
		# Pods first, so that the kubelet stops their sandboxes (CNI DEL).
		"$bin/kubectl" delete namespace --wait=false -l toolgate-k8s-test >/dev/null 2>&1 || true
		"$bin/kubectl" delete deploy,rs,pods --all --all-namespaces --grace-period=0 --force --wait=false >/dev/null 2>&1 || true
		wait_for "pod teardown" 30 no_sandboxes "$bin" || true
	fi
	local c
	for c in kube-proxy kubelet kube-scheduler kube-controller-manager kube-apiserver; do stop "$c"; done
	if running containerd; then
		local id
		for id in $("$bin/ctr" -a "$sock" -n k8s.io tasks ls -q 2>/dev/null); do
			"$bin/ctr" -a "$sock" -n k8s.io tasks kill -s KILL "$id" >/dev/null 2>&1 || true
		done
	fi
	stop containerd
	stop etcd
	# Shims of ours that outlived containerd (by their executable: ours only).
	local p
	for p in /proc/[0-9]*; do
		if [ "$(readlink "$p/exe" 2>/dev/null)" = "$bin/containerd-shim-runc-v2" ]; then kill -KILL "${p#/proc/}" 2>/dev/null || true; fi
	done
	[ ! -x "$bin/kube-proxy" ] || "$bin/kube-proxy" --cleanup >/dev/null 2>&1 || true
	noleak_rules -D
	ip link del tgk8s0 2>/dev/null || true
	# Every mount under $root (pod volumes, netns, the kubelet root's rshared bind), deepest first.
	local m
	while read -r m; do umount -l "$m" 2>/dev/null || true; done < <(awk -v r="$root" '$5 == r || index($5, r "/") == 1 {print $5}' /proc/self/mountinfo | sort -r)
	restore_host
	rm -rf "$root"
	log "cluster down in $(($(date +%s) - t0)) s"
}

# kube_chains: "CMD TABLE CHAIN" for every KUBE-* iptables chain (the
# kubelet's KUBE-FIREWALL and canaries outlive kube-proxy --cleanup).
kube_chains() {
	local cmd table
	for cmd in iptables ip6tables; do
		for table in filter nat mangle; do
			"$cmd" -t "$table" -S 2>/dev/null | awk -v c="$cmd" -v t="$table" '$1 == "-N" && $2 ~ /^KUBE-/ {print c, t, $2}'
		done
	done
}

# drop_kube_chains: the jumps to KUBE-* chains, then the chains.
drop_kube_chains() {
	local cmd table chain rule
	local -a r
	while read -r cmd table chain; do
		while read -r rule; do
			read -r -a r <<<"${rule/#-A /-D }"
			"$cmd" -t "$table" "${r[@]}" 2>/dev/null || true
		done < <("$cmd" -t "$table" -S 2>/dev/null | grep -- "-j $chain\( \|\$\)" || true)
	done < <(kube_chains)
	while read -r cmd table chain; do "$cmd" -t "$table" -F "$chain" 2>/dev/null || true; done < <(kube_chains)
	while read -r cmd table chain; do "$cmd" -t "$table" -X "$chain" 2>/dev/null || true; done < <(kube_chains)
}

no_sandboxes() { [ -z "$("$1/ctr" -a "$sock" -n k8s.io tasks ls -q 2>/dev/null)" ]; }

# nft_empty "table FAMILY NAME": it has chains at most, no rule, set or map.
nft_empty() {
	# shellcheck disable=SC2086 # "table FAMILY NAME" is three words
	! nft list $1 2>/dev/null | grep -vE '^[[:space:]]*(table .*\{|chain .*\{|type .*;|\}|)$' | grep -q .
}

restore_host() {
	local saved=$root/host.saved kind rest t
	[ -f "$saved" ] || return 0
	while read -r kind rest; do
		case $kind in
		sysctl) sysctl -qw "$rest" || true ;;
		created) rm -rf "$rest" ;;
		kubechains) drop_kube_chains ;;
		esac
	done <"$saved"
	# nft tables that were not there before up and are empty now
	# (iptables-nft's, made by the rules above, and kube-proxy's probes); a
	# table with a rule in it is another program's and is left alone.
	while read -r t; do
		grep -qxF "nft $t" "$saved" || ! nft_empty "$t" || nft delete $t 2>/dev/null || true
	done < <(nft list tables 2>/dev/null)
}

cmd_status() {
	local c bin
	bin=$cache_root/$(recipe_hash)/bin
	for c in etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubelet kube-proxy; do
		if running "$c"; then echo "$c: running (pid $(cat "$run/$c.pid"))"; else echo "$c: stopped"; fi
	done
	if running kube-apiserver; then "$bin/kubectl" get nodes,pods -A -o wide; fi
}

case ${1:-} in
build) bin_dir ;;
up) cmd_up ;;
down) cmd_down ;;
status) cmd_status ;;
env)
	echo "export KUBECONFIG=$KUBECONFIG TOOLGATE_K8S_ROOT=$root TOOLGATE_K8S_BIN=$cache_root/$(recipe_hash)/bin"
	;;
*)
	echo "usage: scripts/k8s-local.sh build|up|down|status|env" >&2
	exit 2
	;;
esac
