package kubernetes

import (
	"net/url"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// prometheusPeer is who may read the metrics port: the selectors that
// base/networkpolicies.yaml and README.md document.
var prometheusPeer = networkingv1.NetworkPolicyPeer{
	NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "monitoring"}},
	PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "prometheus"}},
}

// admitted lists the peers of the rules of policies selecting podLabels
// that admit TCP port (or may: a named port counts); nil peers means from anywhere. ok is false when no
// Ingress policy selects the pods, i.e. everything is admitted.
func (c *checker) admitted(podLabels map[string]string, port int32) (peers [][]networkingv1.NetworkPolicyPeer, ok bool) {
	for _, p := range c.m.policies {
		if !c.selects("NetworkPolicy "+p.Name, &p.Spec.PodSelector, podLabels) ||
			!slices.Contains(p.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
			continue
		}
		ok = true
		for _, r := range p.Spec.Ingress {
			if len(r.Ports) == 0 || slices.ContainsFunc(r.Ports, func(pp networkingv1.NetworkPolicyPort) bool {
				// A named port may be this one: count it.
				return pp.Port == nil || pp.Port.Type == intstr.String || pp.Port.IntVal <= port &&
					(pp.EndPort == nil && pp.Port.IntVal == port || pp.EndPort != nil && *pp.EndPort >= port)
			}) {
				peers = append(peers, r.From)
			}
		}
	}
	return peers, ok
}

// checkNetworkPolicies: only worker pods reach the gateway's port, and only
// Prometheus reaches any pod's metrics port.
func (c *checker) checkNetworkPolicies() {
	var workerLabels map[string]string
	others := map[string]map[string]string{}
	for _, d := range c.m.deployments {
		l := d.Spec.Template.Labels
		if l["app.kubernetes.io/component"] == "worker" {
			workerLabels = l
		} else {
			others[d.Name] = l
		}
	}
	for _, j := range c.m.jobs {
		others["Job "+j.Name] = j.Spec.Template.Labels
	}
	c.checkJobPolicies()
	for _, d := range c.m.deployments {
		where := "Deployment " + d.Name
		l := d.Spec.Template.Labels
		env := c.environment(where, d.Spec.Template.Spec.Containers[0])
		metrics, ok := c.admitted(l, c.addrPort(where, "BALLET_METRICS_ADDR", c.setting(env, "BALLET_METRICS_ADDR")))
		if !ok {
			c.errorf("%s: no Ingress NetworkPolicy selects its pods: every port is open", where)
			continue
		}
		for _, from := range metrics {
			if len(from) != 1 || !equalPeer(from[0], prometheusPeer) {
				c.errorf("%s: a NetworkPolicy admits %s to the metrics port, want only Prometheus (%s)", where, peersString(from), peerString(prometheusPeer))
			}
		}
		if l["app.kubernetes.io/component"] != "gateway" {
			continue
		}
		gw, _ := c.admitted(l, c.addrPort(where, "BALLET_GATEWAY_ADDR", c.setting(env, "BALLET_GATEWAY_ADDR")))
		if len(gw) == 0 {
			c.errorf("%s: no NetworkPolicy rule admits the workers to the gateway port", where)
		}
		for _, from := range gw {
			if len(from) == 0 {
				c.errorf("%s: a NetworkPolicy rule admits anyone to the gateway port", where)
			}
			for _, peer := range from {
				if peer.NamespaceSelector != nil || peer.IPBlock != nil || !c.selects(where, peer.PodSelector, workerLabels) {
					c.errorf("%s: a NetworkPolicy admits %s to the gateway port, which is not the worker pods", where, peerString(peer))
					continue
				}
				for name, ol := range others {
					if c.selects(where, peer.PodSelector, ol) {
						c.errorf("%s: a NetworkPolicy peer admitting the workers to the gateway port also admits %s", where, name)
					}
				}
			}
		}
	}
}

// peerString describes a peer: "pods a=b in namespaces c=d", "anyone".
func peerString(p networkingv1.NetworkPolicyPeer) string {
	var parts []string
	if p.PodSelector != nil {
		parts = append(parts, "pods "+metav1.FormatLabelSelector(p.PodSelector))
	}
	if p.NamespaceSelector != nil {
		parts = append(parts, "in namespaces "+metav1.FormatLabelSelector(p.NamespaceSelector))
	}
	if p.IPBlock != nil {
		parts = append(parts, "addresses "+p.IPBlock.CIDR)
	}
	return strings.Join(parts, " ")
}

// peersString describes a rule's peers; none is anyone.
func peersString(from []networkingv1.NetworkPolicyPeer) string {
	if len(from) == 0 {
		return "anyone"
	}
	var s []string
	for _, p := range from {
		s = append(s, peerString(p))
	}
	return strings.Join(s, ", ")
}

func equalPeer(a, b networkingv1.NetworkPolicyPeer) bool {
	sel := func(x, y *metav1.LabelSelector) bool {
		return (x == nil) == (y == nil) && (x == nil || labels.Equals(x.MatchLabels, y.MatchLabels) && len(x.MatchExpressions) == 0 && len(y.MatchExpressions) == 0)
	}
	return a.IPBlock == nil && b.IPBlock == nil && sel(a.NamespaceSelector, b.NamespaceSelector) && sel(a.PodSelector, b.PodSelector)
}

// policies are the NetworkPolicies of type typ that select pods with these
// labels.
func (c *checker) policies(podLabels map[string]string, typ networkingv1.PolicyType) []*networkingv1.NetworkPolicy {
	var out []*networkingv1.NetworkPolicy
	for _, p := range c.m.policies {
		if slices.Contains(p.Spec.PolicyTypes, typ) && c.selects("NetworkPolicy "+p.Name, &p.Spec.PodSelector, podLabels) {
			out = append(out, p)
		}
	}
	return out
}

// dnsPort is where a pod asks the cluster DNS for Postgres's address.
const dnsPort = 53

// checkJobPolicies: a Job's pod (the migration) takes no traffic and
// connects only to Postgres, on the port of its database.url, and to DNS.
func (c *checker) checkJobPolicies() {
	for _, j := range c.m.jobs {
		where := "Job " + j.Name
		l := j.Spec.Template.Labels
		in := c.policies(l, networkingv1.PolicyTypeIngress)
		if len(in) == 0 {
			c.errorf("%s: no Ingress NetworkPolicy selects its pod: every port is open", where)
		}
		for _, p := range in {
			if len(p.Spec.Ingress) > 0 {
				c.errorf("%s: NetworkPolicy %s admits traffic to its pod, which serves nothing", where, p.Name)
			}
		}
		out := c.policies(l, networkingv1.PolicyTypeEgress)
		if len(out) == 0 {
			c.errorf("%s: no Egress NetworkPolicy selects its pod: it may connect anywhere", where)
			continue
		}
		db := c.databasePort(where, j.Spec.Template.Spec.Containers[0])
		postgres := false
		for _, p := range out {
			for _, r := range p.Spec.Egress {
				if len(r.Ports) == 0 {
					c.errorf("%s: NetworkPolicy %s lets its pod reach every port of %s", where, p.Name, peersString(r.To))
				}
				for _, pp := range r.Ports {
					proto := corev1.ProtocolTCP
					if pp.Protocol != nil {
						proto = *pp.Protocol
					}
					switch {
					case pp.Port == nil || pp.Port.Type != intstr.Int || pp.EndPort != nil:
						c.errorf("%s: NetworkPolicy %s: egress port %v is not one port number", where, p.Name, pp.Port)
					case pp.Port.IntVal == db && proto == corev1.ProtocolTCP:
						postgres = true
					case pp.Port.IntVal != dnsPort || proto == corev1.ProtocolSCTP:
						c.errorf("%s: NetworkPolicy %s lets its pod reach %s port %d, want only Postgres (TCP %d, database.url) and DNS (%d)",
							where, p.Name, proto, pp.Port.IntVal, db, dnsPort)
					}
				}
			}
		}
		if !postgres {
			c.errorf("%s: no NetworkPolicy lets its pod reach Postgres (TCP %d, the port of database.url)", where, db)
		}
	}
}

// databasePort is the port of a container's database.url when its Secret
// is rendered, else libpq's default.
func (c *checker) databasePort(where string, ct corev1.Container) int32 {
	ref := c.environment(where, ct)["BALLET_DATABASE_URL"].secret
	for _, s := range c.m.secrets {
		for k, v := range s.StringData {
			if s.Name+"/"+k != ref {
				continue
			}
			u, err := url.Parse(v)
			if err != nil {
				c.errorf("%s: database.url from Secret %s: %v", where, ref, err)
				break
			}
			if p, err := strconv.ParseInt(u.Port(), 10, 32); err == nil {
				return int32(p)
			}
		}
	}
	return 5432
}
