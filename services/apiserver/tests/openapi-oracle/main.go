// Command openapi-oracle validates custom objects as Kubernetes' apiextensions server does:
// with kube-openapi's validate package (k8s.io/kube-openapi/pkg/validation/validate), its
// results turned into field errors as apiextensions-apiserver's
// pkg/apiserver/validation/validation.go does (kubeOpenAPIResultToFieldErrors, Kubernetes
// 1.32), printed as apimachinery's field.Error prints them. keel's differential test
// (tests/openapi_oracle.rs) builds it, feeds it the cases it also runs through keel's
// validator, and compares the messages.
//
// It builds in GOPATH mode against Debian's golang-k8s-kube-openapi-dev (a 2021 snapshot), so
// nothing is downloaded: GO111MODULE=off GOPATH=/usr/share/gocode go build. What the
// snapshot lacks of Kubernetes 1.32 is done here as 1.32 does it:
//   - a Validation error has no `Valid` (the limit) yet: for too long, too many items and too
//     many properties the limit is read back from kube-openapi's own message;
//   - apimachinery's field package is not packaged: its Error() is written out below.
//
// Input (stdin), one JSON document: {"cases": [{"schema": {...}, "object": {...}}, ...]};
// output (stdout): for each case, the list of field errors as Kubernetes prints them
// ("spec.size: Invalid value: 101: spec.size in body should be ...").
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	openapierrors "k8s.io/kube-openapi/pkg/validation/errors"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"k8s.io/kube-openapi/pkg/validation/strfmt"
	"k8s.io/kube-openapi/pkg/validation/validate"
)

type input struct {
	Cases []struct {
		Schema json.RawMessage `json:"schema"`
		Object json.RawMessage `json:"object"`
	} `json:"cases"`
}

// The formats apiextensions keeps (StripUnsupportedFormatsPostProcess, which reads a name
// without its `-`s as go-openapi does); others are dropped.
var supportedFormats = map[string]bool{
	"bsonobjectid": true, "uri": true, "email": true, "hostname": true, "ipv4": true,
	"ipv6": true, "cidr": true, "mac": true, "uuid": true, "uuid3": true, "uuid4": true,
	"uuid5": true, "isbn": true, "isbn10": true, "isbn13": true, "creditcard": true,
	"ssn": true, "hexcolor": true, "rgbcolor": true, "byte": true, "password": true,
	"date": true, "duration": true, "datetime": true,
}

// postProcess does what ConvertJSONSchemaPropsWithPostProcess does beyond copying fields:
// x-kubernetes-int-or-string is the types integer and string; unsupported formats go.
func postProcess(s *spec.Schema) {
	if s == nil {
		return
	}
	if v, ok := s.Extensions["x-kubernetes-int-or-string"]; ok && v == true {
		s.Type = spec.StringOrArray{"integer", "string"}
	}
	if !supportedFormats[strings.ReplaceAll(s.Format, "-", "")] {
		s.Format = ""
	}
	for k, p := range s.Properties {
		postProcess(&p)
		s.Properties[k] = p
	}
	if s.Items != nil {
		postProcess(s.Items.Schema)
		for i := range s.Items.Schemas {
			postProcess(&s.Items.Schemas[i])
		}
	}
	if s.AdditionalProperties != nil {
		postProcess(s.AdditionalProperties.Schema)
	}
	for _, list := range [][]spec.Schema{s.AllOf, s.OneOf, s.AnyOf} {
		for i := range list {
			postProcess(&list[i])
		}
	}
	postProcess(s.Not)
}

// unstructured turns json.Numbers into int64 or float64, as Kubernetes' unstructured JSON
// decoding does.
func unstructured(v interface{}) interface{} {
	switch t := v.(type) {
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return i
		}
		f, _ := t.Float64()
		return f
	case map[string]interface{}:
		for k, x := range t {
			t[k] = unstructured(x)
		}
	case []interface{}:
		for i, x := range t {
			t[i] = unstructured(x)
		}
	}
	return v
}

// fieldError is apimachinery's field.Error.
type fieldError struct {
	typ    string
	field  string
	value  interface{}
	detail string
}

const omitValue = "<omitted>"

// Error is field.Error's Error(): "<field>: <ErrorBody>".
func (v fieldError) Error() string {
	var s string
	switch {
	case v.typ == "Required value" || v.typ == "Forbidden" || v.typ == "Too long" || v.typ == "Internal error":
		s = v.typ
	case v.value == omitValue:
		s = v.typ
	default:
		value := v.value
		valueType := reflect.TypeOf(value)
		if value == nil || valueType == nil {
			value = "null"
		} else if valueType.Kind() == reflect.Ptr {
			if rv := reflect.ValueOf(value); rv.IsNil() {
				value = "null"
			} else {
				value = rv.Elem().Interface()
			}
		}
		switch t := value.(type) {
		case int64, int32, float64, float32, bool:
			s = fmt.Sprintf("%s: %v", v.typ, value)
		case string:
			s = fmt.Sprintf("%s: %q", v.typ, t)
		case fmt.Stringer:
			s = fmt.Sprintf("%s: %s", v.typ, t.String())
		default:
			s = fmt.Sprintf("%s: %#v", v.typ, value)
		}
	}
	if len(v.detail) != 0 {
		s += fmt.Sprintf(": %s", v.detail)
	}
	field := v.field
	if field == "" {
		field = "<nil>"
	}
	return fmt.Sprintf("%s: %s", field, s)
}

var lastNumber = regexp.MustCompile(`(-?\d+) (chars long|items|properties)$`)

// limit is the limit kube-openapi 1.32 keeps in `Valid`, read back from its message.
func limit(message string) int64 {
	m := lastNumber.FindStringSubmatch(message)
	if m == nil {
		return -1
	}
	i, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return -1
	}
	return i
}

func orEmpty(v interface{}) interface{} {
	if v == nil {
		return ""
	}
	return v
}

// toFieldErrors is kubeOpenAPIResultToFieldErrors with a nil field path.
func toFieldErrors(result *validate.Result) []string {
	out := []string{}
	for _, err := range result.Errors {
		switch err := err.(type) {
		case *openapierrors.Validation:
			path := ""
			if len(err.Name) > 0 && err.Name != "." {
				path = strings.TrimPrefix(err.Name, ".")
			}
			var e fieldError
			switch err.Code() {
			case openapierrors.RequiredFailCode:
				e = fieldError{"Required value", path, "", ""}
			case openapierrors.EnumFailCode:
				values := []string{}
				for _, allowed := range err.Values {
					if s, ok := allowed.(string); ok {
						values = append(values, s)
					} else {
						j, _ := json.Marshal(allowed)
						values = append(values, string(j))
					}
				}
				detail := ""
				if len(values) > 0 {
					quoted := make([]string, len(values))
					for i, v := range values {
						quoted[i] = strconv.Quote(v)
					}
					detail = "supported values: " + strings.Join(quoted, ", ")
				}
				e = fieldError{"Unsupported value", path, err.Value, detail}
			case openapierrors.TooLongFailCode:
				max := limit(err.Error())
				detail := "value is too long"
				if max >= 0 {
					detail = fmt.Sprintf("may not be longer than %d", max)
				}
				e = fieldError{"Too long", path, orEmpty(err.Value), detail}
			case openapierrors.MaxItemsFailCode, openapierrors.TooManyPropertiesCode:
				actual := int64(-1)
				if i, ok := err.Value.(int64); ok {
					actual = i
				}
				max := limit(err.Error())
				detail := "has too many items"
				if max >= 0 {
					detail = fmt.Sprintf("must have at most %d items", max)
				}
				var shown interface{} = omitValue
				if actual >= 0 {
					shown = int(actual)
				}
				e = fieldError{"Too many", path, shown, detail}
			case openapierrors.InvalidTypeCode:
				e = fieldError{"Invalid value", path, orEmpty(err.Value), err.Error()}
			default:
				e = fieldError{"Invalid value", path, orEmpty(err.Value), err.Error()}
			}
			out = append(out, e.Error())
		default:
			out = append(out, fieldError{"Invalid value", "", "", err.Error()}.Error())
		}
	}
	return out
}

func main() {
	var in input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		fmt.Fprintln(os.Stderr, "input:", err)
		os.Exit(2)
	}
	results := [][]string{}
	for i, c := range in.Cases {
		schema := &spec.Schema{}
		if err := json.Unmarshal(c.Schema, schema); err != nil {
			fmt.Fprintf(os.Stderr, "case %d: schema: %v\n", i, err)
			os.Exit(2)
		}
		postProcess(schema)
		d := json.NewDecoder(bytes.NewReader(c.Object))
		d.UseNumber()
		var obj interface{}
		if err := d.Decode(&obj); err != nil {
			fmt.Fprintf(os.Stderr, "case %d: object: %v\n", i, err)
			os.Exit(2)
		}
		validator := validate.NewSchemaValidator(schema, nil, "", strfmt.Default)
		results = append(results, toFieldErrors(validator.Validate(unstructured(obj))))
	}
	if err := json.NewEncoder(os.Stdout).Encode(results); err != nil {
		fmt.Fprintln(os.Stderr, "output:", err)
		os.Exit(2)
	}
}
