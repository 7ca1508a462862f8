package render

import (
	"errors"
	"fmt"
	"math"
	"reflect"
)

// annotations are a stand-in's annotation values: a string, or a refused.
type annotations map[string]any

var annotationsType = reflect.TypeFor[annotations]()

// index replaces text/template's builtin of the same name and behaves as it does, but
// for one case: a key missing from a stand-in's annotations gives "", as it does from
// an endpoint's map[string]string. The builtin would give the nil of their element
// type, any, which prints "<no value>", and compares unequal to "".
func index(item reflect.Value, keys ...reflect.Value) (reflect.Value, error) {
	for _, key := range keys {
		item = followValue(item)
		if !item.IsValid() {
			return reflect.Value{}, errors.New("index of nil")
		}
		switch item.Kind() {
		case reflect.Array, reflect.Slice, reflect.String:
			i, err := position(followValue(key), item.Len())
			if err != nil {
				return reflect.Value{}, err
			}
			item = item.Index(i)
		case reflect.Map:
			k, err := mapKey(followValue(key), item.Type().Key())
			if err != nil {
				return reflect.Value{}, err
			}
			item = mapIndex(item, k)
		default:
			return reflect.Value{}, fmt.Errorf("can't index item of type %s", item.Type())
		}
	}
	return item, nil
}

func mapIndex(m, k reflect.Value) reflect.Value {
	switch v := m.MapIndex(k); {
	case v.IsValid():
		return v
	case m.Type() == annotationsType:
		return reflect.ValueOf("")
	default:
		return reflect.Zero(m.Type().Elem())
	}
}

// followValue follows pointers and interfaces to the value they hold; invalid for nil.
func followValue(v reflect.Value) reflect.Value {
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return reflect.Value{}
		}
		v = v.Elem()
	}
	return v
}

func position(v reflect.Value, length int) (int, error) {
	var i int64
	switch {
	case !v.IsValid():
		return 0, errors.New("cannot index slice/array with nil")
	case v.CanInt():
		i = v.Int()
	case v.CanUint() && v.Uint() > math.MaxInt64:
		return 0, fmt.Errorf("index out of range: %d", v.Uint())
	case v.CanUint():
		i = int64(v.Uint())
	default:
		return 0, fmt.Errorf("cannot index slice/array with type %s", v.Type())
	}
	if i < 0 || i >= int64(length) {
		return 0, fmt.Errorf("index out of range: %d", i)
	}
	return int(i), nil
}

func mapKey(v reflect.Value, t reflect.Type) (reflect.Value, error) {
	switch {
	case !v.IsValid() && canBeNil(t):
		return reflect.Zero(t), nil
	case !v.IsValid():
		return reflect.Value{}, fmt.Errorf("value is nil; should be of type %s", t)
	case v.Type().AssignableTo(t):
		return v, nil
	case (v.CanInt() || v.CanUint()) && isInteger(t) && v.Type().ConvertibleTo(t):
		return v.Convert(t), nil
	}
	return reflect.Value{}, fmt.Errorf("value has type %s; should be %s", v.Type(), t)
}

func canBeNil(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Chan, reflect.Func, reflect.Interface, reflect.Map, reflect.Pointer, reflect.Slice:
		return true
	}
	return false
}

func isInteger(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return true
	}
	return false
}
