"""CEL for DRA device selectors, on the real CEL evaluator cel-python (`celpy`).

The environment follows kubernetes/kubernetes
staging/src/k8s.io/dynamic-resource-allocation/cel/compile.go:

* one variable, `device`, with `driver` (string), `attributes` and `capacity`: maps from a domain to a map
  from an identifier to a value; an attribute name without a domain takes the driver's name as domain
  (parseQualifiedName); looking up a domain the device does not have gives an empty map
  (newStringInterfaceMapWithDefault), looking up an identifier it does not have is a runtime error;
* attribute values are int, bool, string or, for `version`, a semantic version (library.SemverLib);
* capacity values are Kubernetes quantities (apiserver's library.Quantity);
* `cel.bind` (cel-go ext.Bindings);
* the expression must evaluate to bool.

celpy lacks the Kubernetes libraries, so they are implemented here as celpy extension functions: the
quantity library (`quantity()`, `isQuantity()`, `compareTo`, `isGreaterThan`, `isLessThan`, `add`, `sub`,
`sign`, `isInteger`, `asInteger`, `asApproximateFloat`; apiserver pkg/cel/library/quantity.go), the semver
library (`semver()`, `isSemver()`, `compareTo`, `isGreaterThan`, `isLessThan`, `major`, `minor`, `patch`;
apiserver pkg/cel/library/semverlib.go) and the `cel.bind(name, value, expr)` macro (rewritten before
parsing into a comprehension-free form celpy evaluates: see `_expand_bind`).
"""

import re
import threading
from fractions import Fraction

try:
    import celpy
    from celpy import celtypes
    from celpy.celparser import CELParseError
    from celpy.evaluation import CELEvalError
    HAS_CELPY = True
except ImportError:  # the server still serves everything else
    HAS_CELPY = False

_BINARY = {"Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50, "Ei": 2 ** 60}
_DECIMAL = {"n": Fraction(1, 10 ** 9), "u": Fraction(1, 10 ** 6), "m": Fraction(1, 1000), "": 1,
            "k": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9, "T": 10 ** 12, "P": 10 ** 15, "E": 10 ** 18}
# apimachinery pkg/api/resource/quantity.go: sign, digits, optional fraction, then a suffix or an exponent
_QUANTITY = re.compile(r"^([+-]?)(\d+(?:\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$")
_SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
                     r"(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$")


class CelError(Exception):
    """A CEL expression that does not compile, or fails at run time (message as the API server words it)."""


def parse_quantity(text):
    """The value of a Kubernetes quantity string as a Fraction; ValueError when it is not one."""
    match = _QUANTITY.match(str(text).strip())
    if not match:
        raise ValueError("quantities must match the regular expression "
                         "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
    sign, number, suffix = match.groups()
    value = Fraction(number)
    suffix = suffix or ""
    if suffix in _BINARY:
        value *= _BINARY[suffix]
    elif suffix in _DECIMAL:
        value *= _DECIMAL[suffix]
    else:
        value *= Fraction(10) ** int(suffix[1:])
    return -value if sign == "-" else value


class Quantity:
    """A Kubernetes quantity in CEL (`kubernetes.Quantity`)."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __eq__(self, other):
        return isinstance(other, Quantity) and self.value == other.value

    def __hash__(self):
        return hash(self.value)

    def __repr__(self):
        return "Quantity(%s)" % self.value


class Semver:
    """A semantic version in CEL (`kubernetes.Semver`)."""

    __slots__ = ("parts", "pre")

    def __init__(self, text):
        match = _SEMVER.match(str(text))
        if not match:
            raise ValueError("No Major.Minor.Patch elements found")
        self.parts = tuple(int(x) for x in match.groups()[:3])
        self.pre = match.group(4)

    def key(self):
        # a pre-release sorts before its release (semver 2.0.0 section 11)
        return self.parts + ((1, "") if self.pre is None else (0, self.pre))

    def __eq__(self, other):
        return isinstance(other, Semver) and self.key() == other.key()

    def __hash__(self):
        return hash(self.key())

    def __repr__(self):
        return "Semver(%d.%d.%d)" % self.parts


def _fail(message):
    raise CelError(message)


def _cmp(a, b):
    if isinstance(a, Quantity) and isinstance(b, Quantity):
        x, y = a.value, b.value
    elif isinstance(a, Semver) and isinstance(b, Semver):
        x, y = a.key(), b.key()
    else:
        _fail("no such overload")
    return (x > y) - (x < y)


def _quantity(text):
    try:
        return Quantity(parse_quantity(text))
    except ValueError as exc:
        _fail(str(exc))


def _semver(text):
    try:
        return Semver(text)
    except ValueError as exc:
        _fail("Failed to parse \"%s\": %s" % (text, exc))


def _is(parse):
    def check(text):
        try:
            parse(str(text))
        except ValueError:
            return celtypes.BoolType(False)
        return celtypes.BoolType(True)
    return check


def _quantity_only(name, fn):
    def call(*args):
        if not all(isinstance(a, Quantity) for a in args):
            _fail("no such overload: %s" % name)
        return fn(*args)
    return call


def _semver_only(name, index):
    def call(v):
        if not isinstance(v, Semver):
            _fail("no such overload: %s" % name)
        return celtypes.IntType(v.parts[index])
    return call


def _functions():
    return {
        "quantity": _quantity,
        "isQuantity": _is(parse_quantity),
        "semver": _semver,
        "isSemver": _is(Semver),
        "compareTo": lambda a, b: celtypes.IntType(_cmp(a, b)),
        "isGreaterThan": lambda a, b: celtypes.BoolType(_cmp(a, b) > 0),
        "isLessThan": lambda a, b: celtypes.BoolType(_cmp(a, b) < 0),
        "add": _quantity_only("add", lambda a, b: Quantity(a.value + b.value)),
        "sub": _quantity_only("sub", lambda a, b: Quantity(a.value - b.value)),
        "sign": _quantity_only("sign", lambda a: celtypes.IntType((a.value > 0) - (a.value < 0))),
        "isInteger": _quantity_only("isInteger", lambda a: celtypes.BoolType(a.value.denominator == 1)),
        "asInteger": _quantity_only("asInteger", lambda a: celtypes.IntType(int(a.value))),
        "asApproximateFloat": _quantity_only("asApproximateFloat", lambda a: celtypes.DoubleType(float(a.value))),
        "major": _semver_only("major", 0),
        "minor": _semver_only("minor", 1),
        "patch": _semver_only("patch", 2),
    }


# ------------------------------------------------------------------ cel.bind
_BIND = "cel.bind("


def _split_args(text, start):
    """The three arguments of cel.bind( starting at `start` (just after the parenthesis) and the end index."""
    depth, quote, args, cur = 0, None, [], start
    i = start
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 2
                continue
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                args.append(text[cur:i])
                return args, i + 1
            depth -= 1
        elif ch == "," and depth == 0:
            args.append(text[cur:i])
            cur = i + 1
        i += 1
    raise CelError("compilation failed: ERROR: <input>:1:%d: Syntax error: missing ')' at '<EOF>'" % (start + 1))


def _expand_bind(text):
    """`cel.bind(x, init, body)` as `[init].map(x, body)[0]`: the same value, evaluated once, in plain CEL."""
    while True:
        at = _find_outside_strings(text, _BIND)
        if at < 0:
            return text
        args, end = _split_args(text, at + len(_BIND))
        if len(args) != 3 or not re.match(r"^\s*[A-Za-z_][A-Za-z0-9_]*\s*$", args[0]):
            raise CelError("compilation failed: ERROR: <input>:1:%d: cel.bind() variable name must be a "
                           "simple identifier" % (at + 1))
        text = "%s([%s].map(%s, %s)[0])%s" % (text[:at], args[1], args[0].strip(), args[2], text[end:])


def _find_outside_strings(text, needle):
    quote = None
    i = 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 2
                continue
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif text.startswith(needle, i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] in "_.")):
            return i
        i += 1
    return -1


# ------------------------------------------------------------------ compile and evaluate
class Program:
    """A compiled selector; `matches(device)` evaluates it for one device (a ResourceSlice device dict)."""

    def __init__(self, expression, runner):
        self.expression = expression
        self._runner = runner

    def matches(self, driver, device):
        try:
            result = self._runner.evaluate({"device": device_value(driver, device)})
        except CelEvalErrorType as exc:
            raise CelError(_eval_message(exc)) from None
        except CelError:
            raise
        except Exception as exc:  # noqa: BLE001  (celpy raises plain Python errors for some type faults)
            raise CelError("no such overload: %s" % exc) from None
        if isinstance(result, CelEvalErrorType):
            raise CelError(_eval_message(result))
        if not isinstance(result, celtypes.BoolType):
            raise CelError("CEL result of type %s could not be converted to bool" % type(result).__name__)
        return bool(result)


CelEvalErrorType = CELEvalError if HAS_CELPY else Exception


def _eval_message(exc):
    args = getattr(exc, "args", ())
    text = args[0] if args else str(exc)
    if isinstance(text, tuple):
        text = text[0]
    text = str(text)
    if text.startswith("no such member in mapping: "):
        return "no such key: %s" % text.split(": ", 1)[1].strip("'")
    return text


_ENV = None
_CACHE = {}
_LOCK = threading.Lock()
_IDENT = re.compile(r"(?<![.\w'\"])([A-Za-z_][A-Za-z0-9_]*)\s*(?=[.\[])")
_KNOWN_ROOTS = {"device", "cel"}


def compile_expression(expression):
    """A Program for `expression`, or CelError with the compiler's message (cached by expression)."""
    if not HAS_CELPY:
        raise CelError("compilation failed: the CEL evaluator (cel-python) is not installed")
    with _LOCK:
        cached = _CACHE.get(expression)
        if cached is not None:
            if isinstance(cached, CelError):
                raise cached
            return cached
        try:
            program = _compile(expression)
        except CelError as exc:
            _CACHE[expression] = exc
            raise
        _CACHE[expression] = program
        return program


def _compile(expression):
    global _ENV
    if _ENV is None:
        _ENV = celpy.Environment()
    source = _expand_bind(expression)
    try:
        ast = _ENV.compile(source)
    except CELParseError as exc:
        line, column = (exc.line or 1), (exc.column or 1)
        detail = str(exc.args[0] if exc.args else exc).splitlines()[0]
        raise CelError("compilation failed: ERROR: <input>:%d:%d: Syntax error: %s" % (line, column, detail)) from None
    # compile-time check of the environment: `device` is the only variable (compile.go newCompiler)
    bound = set(re.findall(r"\.(?:map|filter|all|exists|exists_one)\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*,", source))
    for name in _IDENT.findall(_strip_strings(source)):
        if name not in _KNOWN_ROOTS and name not in bound and name not in _functions():
            raise CelError("compilation failed: ERROR: <input>:1:%d: undeclared reference to '%s' "
                           "(in container '')" % (expression.find(name) + 1, name))
    program = Program(expression, _ENV.program(ast, functions=_functions()))
    # the result type: an expression that is a constant of another type never evaluates to bool
    probe = _probe(program)
    if probe is not None and not isinstance(probe, celtypes.BoolType):
        raise CelError("must evaluate to bool or the unknown type, not %s" % _cel_type_name(probe))
    return program


def _strip_strings(text):
    return re.sub(r"'(?:\\.|[^'\\])*'|\"(?:\\.|[^\"\\])*\"", "''", text)


def _probe(program):
    """The value of the expression for a device without attributes, None when that is an error."""
    try:
        result = program._runner.evaluate({"device": device_value("", {})})
    except Exception:  # noqa: BLE001
        return None
    if isinstance(result, CelEvalErrorType):
        return None
    return result


def _cel_type_name(value):
    for ctype, name in ((celtypes.BoolType, "bool"), (celtypes.IntType, "int"), (celtypes.UintType, "uint"),
                        (celtypes.DoubleType, "double"), (celtypes.StringType, "string"),
                        (celtypes.ListType, "list(dyn)"), (celtypes.MapType, "map(dyn, dyn)")):
        if isinstance(value, ctype):
            return name
    return type(value).__name__


class _DomainMap(celtypes.MapType if HAS_CELPY else dict):
    """device.attributes / device.capacity: an unknown domain gives an empty map."""

    def __getitem__(self, key):
        try:
            return super().__getitem__(key)
        except KeyError:
            return celtypes.MapType({})

    def __contains__(self, key):
        return super().__contains__(key)


def _attribute_value(attr):
    if "int" in attr:
        return celtypes.IntType(int(attr["int"]))
    if "bool" in attr:
        return celtypes.BoolType(bool(attr["bool"]))
    if "string" in attr:
        return celtypes.StringType(attr["string"])
    if "version" in attr:
        return Semver(attr["version"])
    raise CelError("unsupported attribute value")


def _split_name(name, driver):
    domain, sep, ident = str(name).partition("/")
    return (domain, ident) if sep else (driver, domain)


def device_value(driver, device):
    """The CEL value of `device` for one device of a ResourceSlice of `driver` (compile.go DeviceMatches)."""
    attributes, capacity = {}, {}
    for name, attr in (device.get("attributes") or {}).items():
        domain, ident = _split_name(name, driver)
        try:
            value = _attribute_value(attr or {})
        except ValueError as exc:
            raise CelError("attribute %s: parse semantic version: %s" % (name, exc)) from None
        attributes.setdefault(celtypes.StringType(domain), {})[celtypes.StringType(ident)] = value
    for name, cap in (device.get("capacity") or {}).items():
        domain, ident = _split_name(name, driver)
        capacity.setdefault(celtypes.StringType(domain), {})[celtypes.StringType(ident)] = \
            Quantity(parse_quantity((cap or {}).get("value", "0")))
    return celtypes.MapType({
        celtypes.StringType("driver"): celtypes.StringType(driver),
        celtypes.StringType("attributes"): _DomainMap({k: celtypes.MapType(v) for k, v in attributes.items()}),
        celtypes.StringType("capacity"): _DomainMap({k: celtypes.MapType(v) for k, v in capacity.items()}),
    })
