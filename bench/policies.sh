#!/usr/bin/env bash
# Create throughput with a ValidatingAdmissionPolicy against none (issue 44): its own etcd and
# keel-apiserver (release builds, bench/lib.sh), `keel-loadtest fill` creating ConfigMaps with
# 64 writers, first with no policy, then with one ValidatingAdmissionPolicy bound with `Deny`
# to every ConfigMap create: three validations (a name rule, a size limit on data, a regex on
# every key) and a variable, all of which pass. Prints Markdown rows for BENCHMARKS.md.
#
#   bench/policies.sh                 # 20,000 ConfigMaps each way
#   OBJECTS=5000 bench/policies.sh
OBJECTS=${OBJECTS:-20000}
WRITERS=${WRITERS:-64}
source "$(dirname "$0")/lib.sh"
kc() { ./target/release/keelctl --server http://127.0.0.1:36443 "$@"; }

echo "==> $OBJECTS ConfigMaps, no policy" >&2
fill bench-none

cat >"$work/policy.yaml" <<'YAML'
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: bench.keel.dev
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - {operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [configmaps]}
  variables:
    - name: data
      expression: "has(object.data) ? object.data : {}"
  validations:
    - expression: "object.metadata.name.size() <= 63 && !object.metadata.name.startsWith('tmp-')"
      message: names are short and not temporary
    - expression: "variables.data.size() <= 16"
      messageExpression: "'at most 16 keys, not ' + string(variables.data.size())"
    - expression: "variables.data.all(k, k.matches('^[a-z0-9._-]+$'))"
      message: keys are lowercase
      reason: Forbidden
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: bench.keel.dev
spec:
  policyName: bench.keel.dev
  validationActions: [Deny]
YAML
kc apply -f "$work/policy.yaml" >/dev/null

echo "==> $OBJECTS ConfigMaps, one ValidatingAdmissionPolicy" >&2
fill bench-policy

# The policy was in force: a ConfigMap it refuses is refused.
printf 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: tmp-refused\n  namespace: bench-policy\n' >"$work/refused.yaml"
refused=$(kc apply -f "$work/refused.yaml" 2>&1 | grep -c "denied request: names are short and not temporary" || true)

echo "| policies | created | throughput | p50 | p99 | errors |"
echo "|---|---|---|---|---|---|"
row bench-none "none"
row bench-policy "1 ValidatingAdmissionPolicy (3 validations, 1 variable), Deny"
awk -v a="$(field bench-policy ok_per_s)" -v b="$(field bench-none ok_per_s)" \
  'BEGIN { printf "\nwith the policy: %.0f%% of the throughput without\n", 100 * a / b }'
echo "a ConfigMap the policy refuses, refused: $refused"
