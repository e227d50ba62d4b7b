// Command smd-oracle runs sequences of server-side apply operations through the real
// structured-merge-diff library (sigs.k8s.io/structured-merge-diff/v4), driven as
// Kubernetes' field manager drives it, and prints what each operation left: the object, the
// managed fields, or the conflicts. keel-patch's differential test (tests/smd_oracle.rs)
// builds it, feeds it the sequences it also runs through keel's engine, and compares.
//
// It builds in GOPATH mode against Debian's golang-k8s-sigs-structured-merge-diff-dev, so
// nothing is downloaded: GO111MODULE=off GOPATH=/usr/share/gocode go build.
//
// Input (stdin), one JSON document:
//
//	{"schema": "<smd schema YAML>", "type": "root", "sequences": [[op, ...], ...]}
//
// where an op is one of
//
//	{"op": "apply", "manager": "alice", "object": {...}, "force": false}
//	{"op": "update", "manager": "bob", "object": {...}}   (the whole new object)
//	{"op": "untracked", "object": {...}}                  (an object nobody is recorded as owning)
//
// Output (stdout), one JSON document: for each sequence, for each op,
//
//	{"object": {...}, "managedFields": [{"manager", "operation", "fieldsV1"}], "conflicts": [...], "error": "..."}
//
// Each sequence starts from no object. What Kubernetes' field manager adds around the
// library is done here as it does it (k8s.io/apimachinery pkg/util/managedfields/internal):
//   - managers are keyed by identity, manager and operation (an applier has one entry, an
//     updater one per apiVersion; one apiVersion here);
//   - an Update runs as the manager "current-operation", whose fields are then unioned into
//     the updater's entry (managedfieldsupdater.go);
//   - an object with no managed fields is untracked by updates (skipnonapplied.go), and an
//     apply to it first records everything it holds as an Update by "before-first-apply";
//   - an apply whose result holds a null (the library leaves a map or list whose items its
//     removal took as null) is refused as invalid, as Kubernetes refuses it for a custom
//     resource whose schema does not allow nulls (422), and nothing changes; its output is
//     {"invalid": [paths of the nulls]}, a path of ".field" and "[]" for a list's item.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"

	"sigs.k8s.io/structured-merge-diff/v4/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v4/merge"
	"sigs.k8s.io/structured-merge-diff/v4/typed"
)

const version = fieldpath.APIVersion("v1")

type op struct {
	Op      string      `json:"op"`
	Manager string      `json:"manager"`
	Object  interface{} `json:"object"`
	Force   bool        `json:"force"`
}

type input struct {
	Schema    string `json:"schema"`
	Type      string `json:"type"`
	Sequences [][]op `json:"sequences"`
}

type entry struct {
	Manager   string          `json:"manager"`
	Operation string          `json:"operation"`
	FieldsV1  json.RawMessage `json:"fieldsV1"`
}

type conflict struct {
	Manager   string `json:"manager"`
	Operation string `json:"operation"`
	Path      string `json:"path"`
}

type result struct {
	Object        interface{} `json:"object"`
	ManagedFields []entry     `json:"managedFields"`
	Conflicts     []conflict  `json:"conflicts,omitempty"`
	Invalid       []string    `json:"invalid,omitempty"`
	Error         string      `json:"error,omitempty"`
}

// identityConverter converts nothing: every manager writes the one version, as Kubernetes'
// field manager does for a kind served at one version.
type identityConverter struct{}

func (identityConverter) Convert(v *typed.TypedValue, _ fieldpath.APIVersion) (*typed.TypedValue, error) {
	return v, nil
}

func (identityConverter) IsMissingVersionError(error) bool { return false }

// The keys of the managers map: an identity as Kubernetes builds one, minus what is constant.
func identity(manager, operation string) string { return manager + "|" + operation }

func splitIdentity(id string) (string, string) {
	i := strings.LastIndex(id, "|")
	if i < 0 {
		return id, ""
	}
	return id[:i], id[i+1:]
}

const currentOperation = "current-operation"

type state struct {
	parser   typed.ParseableType
	updater  *merge.Updater
	live     interface{} // nil: no object yet
	managers fieldpath.ManagedFields
}

func (s *state) typed(obj interface{}) (*typed.TypedValue, error) {
	if obj == nil {
		obj = map[string]interface{}{}
	}
	return s.parser.FromUnstructured(obj)
}

// update records an Update by manager from the live object to obj, as Kubernetes'
// managedFieldsUpdater does.
func (s *state) update(manager string, liveObj, newObj interface{}) error {
	live, err := s.typed(liveObj)
	if err != nil {
		return fmt.Errorf("live: %v", err)
	}
	next, err := s.typed(newObj)
	if err != nil {
		return fmt.Errorf("new: %v", err)
	}
	_, managers, err := s.updater.Update(live, next, version, s.managers, currentOperation)
	if err != nil {
		return err
	}
	if took, ok := managers[currentOperation]; ok {
		delete(managers, currentOperation)
		id := identity(manager, "Update")
		if previous, ok := managers[id]; ok {
			managers[id] = fieldpath.NewVersionedSet(took.Set().Union(previous.Set()), took.APIVersion(), took.Applied())
		} else {
			managers[id] = took
		}
	}
	s.managers = managers
	return nil
}

func (s *state) run(o op) result {
	switch o.Op {
	case "untracked":
		s.live = normalize(o.Object)
		s.managers = fieldpath.ManagedFields{}
	case "update":
		exists := s.live != nil
		if exists && len(s.managers) == 0 {
			// skipNonApplied: an object nobody is recorded as owning stays untracked.
			s.live = normalize(o.Object)
			break
		}
		if err := s.update(o.Manager, s.live, o.Object); err != nil {
			return result{Error: err.Error()}
		}
		s.live = normalize(o.Object)
	case "apply":
		// A refused apply changes nothing, before-first-apply's entry included.
		before := s.managers.Copy()
		if len(s.managers) == 0 {
			// skipNonApplied: what the object holds is first before-first-apply's.
			if err := s.update("before-first-apply", nil, s.live); err != nil {
				return result{Error: err.Error()}
			}
		}
		live, err := s.typed(s.live)
		if err != nil {
			return result{Error: "live: " + err.Error()}
		}
		config, err := s.typed(o.Object)
		if err != nil {
			return result{Error: "config: " + err.Error()}
		}
		next, managers, err := s.updater.Apply(live, config, version, s.managers, identity(o.Manager, "Apply"), o.Force)
		if err != nil {
			var cs []conflict
			if _, ok := err.(merge.Conflicts); ok {
				cs, err = s.conflicts(live, config, identity(o.Manager, "Apply"))
			}
			s.managers = before
			if err != nil {
				return result{Error: err.Error()}
			}
			out := s.snapshot()
			out.Conflicts = cs
			return out
		}
		if next != nil {
			// The root is the object itself, which keeps its kind and name in Kubernetes: a
			// removal that empties it leaves an empty object, not a null.
			obj := next.AsValue().Unstructured()
			if obj == nil {
				obj = map[string]interface{}{}
			}
			if nulls := nullPaths(obj, ""); len(nulls) > 0 {
				s.managers = before
				sort.Strings(nulls)
				return result{Invalid: nulls}
			}
			s.live = normalize(obj)
		} else if s.live == nil {
			s.live = map[string]interface{}{}
		}
		s.managers = managers
	default:
		return result{Error: "unknown op " + o.Op}
	}
	return s.snapshot()
}

// conflicts are the fields of other managers an apply by id would change, as the library's
// update() finds them. They are not read from its error: v4.1.2's ConflictsFromManagers keeps
// the path its set iteration reuses (v4.2 copies it), so two conflicts under one parent can
// print as one path twice. The forced apply merges and prunes as the refused one did.
func (s *state) conflicts(live, config *typed.TypedValue, id string) ([]conflict, error) {
	next, _, err := s.updater.Apply(live, config, version, s.managers.Copy(), id, true)
	if err != nil {
		return nil, err
	}
	if next == nil {
		return nil, fmt.Errorf("a refused apply changes nothing when forced")
	}
	compare, err := live.Compare(next)
	if err != nil {
		return nil, err
	}
	changed := compare.Modified.Union(compare.Added)
	var out []conflict
	for owner, set := range s.managers {
		if owner == id {
			continue
		}
		m, operation := splitIdentity(owner)
		set.Set().Intersection(changed).Iterate(func(p fieldpath.Path) {
			out = append(out, conflict{Manager: m, Operation: operation, Path: p.Copy().String()})
		})
	}
	return out, nil
}

func (s *state) snapshot() result {
	out := result{Object: s.live, ManagedFields: []entry{}}
	if out.Object == nil {
		out.Object = map[string]interface{}{}
	}
	ids := make([]string, 0, len(s.managers))
	for id := range s.managers {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		set := s.managers[id].Set()
		if set.Empty() {
			continue
		}
		b, err := set.ToJSON()
		if err != nil {
			return result{Error: err.Error()}
		}
		m, operation := splitIdentity(id)
		out.ManagedFields = append(out.ManagedFields, entry{Manager: m, Operation: operation, FieldsV1: b})
	}
	return out
}

// nullPaths lists where v holds nulls.
func nullPaths(v interface{}, at string) []string {
	var out []string
	switch t := v.(type) {
	case nil:
		out = append(out, at)
	case map[string]interface{}:
		for k, x := range t {
			out = append(out, nullPaths(x, at+"."+k)...)
		}
	case []interface{}:
		for _, x := range t {
			out = append(out, nullPaths(x, at+"[]")...)
		}
	}
	return out
}

// normalize copies a JSON value with whole floats as integers (the library's values are int64
// or float64; JSON decoding gives floats).
func normalize(v interface{}) interface{} {
	switch t := v.(type) {
	case map[string]interface{}:
		out := make(map[string]interface{}, len(t))
		for k, x := range t {
			out[k] = normalize(x)
		}
		return out
	case []interface{}:
		out := make([]interface{}, len(t))
		for i, x := range t {
			out[i] = normalize(x)
		}
		return out
	case float64:
		if t == float64(int64(t)) {
			return int64(t)
		}
		return t
	default:
		return v
	}
}

func main() {
	var in input
	dec := json.NewDecoder(os.Stdin)
	if err := dec.Decode(&in); err != nil {
		fmt.Fprintln(os.Stderr, "reading input:", err)
		os.Exit(2)
	}
	parser, err := typed.NewParser(typed.YAMLObject(in.Schema))
	if err != nil {
		fmt.Fprintln(os.Stderr, "schema:", err)
		os.Exit(2)
	}
	pt := parser.Type(in.Type)
	if !pt.IsValid() {
		fmt.Fprintln(os.Stderr, "schema has no type", in.Type)
		os.Exit(2)
	}
	out := make([][]result, 0, len(in.Sequences))
	for _, seq := range in.Sequences {
		s := &state{parser: pt, updater: &merge.Updater{Converter: identityConverter{}}, managers: fieldpath.ManagedFields{}}
		results := make([]result, 0, len(seq))
		for _, o := range seq {
			o.Object = normalize(o.Object)
			results = append(results, s.run(o))
		}
		out = append(out, results)
	}
	enc := json.NewEncoder(os.Stdout)
	if err := enc.Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, "writing output:", err)
		os.Exit(2)
	}
}
