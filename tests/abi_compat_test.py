"""Every recorded version of the ABI is still provided, unchanged, by the current header.

tools/abi/abi-<major>.<minor>.txt is the description //tools:abi_description printed for that
version (recorded when it was released). A later minor version may only append: each function
keeps its table index, name, return and parameter classes (parameter names may be renamed); each
status keeps its value; each struct keeps the fields it had, at the same offsets with the same
classes and sizes (it may grow at its end); each callback keeps its signature. Run by Bazel with
the current description and the recorded ones as arguments; exits 1 and says what changed.
"""
import sys


def read(path):
    """The description as {kind: {key: value}}."""
    entries = {"function": {}, "status": {}, "struct": {}, "field": {}, "callback": {}, "version": {}}
    with open(path) as f:
        for line in f:
            words = line.split()
            if not words:
                continue
            kind = words[0]
            if kind == "function":  # function <index> <name> <return> [name:class ...]
                classes = [w.split(":", 1)[1] for w in words[4:]]
                entries[kind][words[2]] = (int(words[1]), words[3], tuple(classes))
            elif kind == "status":  # status <name> <value>
                entries[kind][words[1]] = int(words[2])
            elif kind == "struct":  # struct <name> <size>
                entries[kind][words[1]] = int(words[2])
            elif kind == "field":  # field <struct> <index> <name> <class> <offset> <size>
                entries[kind][(words[1], words[3])] = (int(words[2]), words[4], int(words[5]), int(words[6]))
            elif kind == "callback":  # callback <type> <return> [name:class ...]
                entries[kind][words[1]] = (words[2], tuple(w.split(":", 1)[1] for w in words[3:]))
            elif kind == "version":
                entries[kind]["version"] = words[1]
    return entries


def compare(old, new, label):
    problems = []
    for name, (index, ret, params) in old["function"].items():
        now = new["function"].get(name)
        if now is None:
            problems.append(f"{label}: function {name} is gone")
        elif now != (index, ret, params):
            problems.append(f"{label}: function {name} was (index {index}, {ret}, {params}), is {now}")
    for name, value in old["status"].items():
        if new["status"].get(name) != value:
            problems.append(f"{label}: status {name} was {value}, is {new['status'].get(name)}")
    for name, size in old["struct"].items():
        if name not in new["struct"]:
            problems.append(f"{label}: struct {name} is gone")
        elif new["struct"][name] < size:
            problems.append(f"{label}: struct {name} shrank from {size} to {new['struct'][name]} bytes")
    for key, field in old["field"].items():
        if new["field"].get(key) != field:
            problems.append(f"{label}: field {key[0]}.{key[1]} was {field}, is {new['field'].get(key)}")
    for name, signature in old["callback"].items():
        if new["callback"].get(name) != signature:
            problems.append(f"{label}: callback {name} was {signature}, is {new['callback'].get(name)}")
    old_major = old["version"]["version"].split(".")[0]
    new_major = new["version"]["version"].split(".")[0]
    if old_major != new_major:
        problems.append(f"{label}: the major version changed ({old_major} to {new_major}): a new soname, not checked here")
    return problems


def main(argv):
    current = read(argv[1])
    problems = []
    for recorded in argv[2:]:
        old = read(recorded)
        label = "version " + old["version"]["version"]
        problems += compare(old, current, label)
        print(f"{label}: {len(old['function'])} functions, {len(old['status'])} statuses, "
              f"{len(old['struct'])} structs, {len(old['callback'])} callbacks checked against "
              f"{current['version']['version']}")
    for p in problems:
        print("CHANGED:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
