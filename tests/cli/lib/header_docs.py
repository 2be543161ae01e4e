"""header_docs.py INCLUDE_DIR - every NPUC_API declaration in the public
headers has a comment (its own, or the one over its group of declarations);
a function returning a pointer says who owns it, one returning npuc_status
what its errors are.  *_defaults() need none: npuc.h's conventions say they
return plain structs by value.  Exits 1 listing the gaps."""
import re, glob, sys
inc = sys.argv[1]
bad = []
total = 0
for h in sorted(glob.glob(inc + "/*.h")):
    lines = open(h).read().split("\n")
    k = 0
    comment = ""
    prev_decl = False
    while k < len(lines):
        l = lines[k]
        st = l.strip()
        if st.startswith("/*"):
            j = k
            block = []
            while True:
                block.append(lines[j])
                if "*/" in lines[j]: break
                j += 1
            comment = " ".join(block)
            k = j + 1
            prev_decl = False
            continue
        if l.startswith("NPUC_API"):
            decl = l
            while not decl.rstrip().endswith(";"):
                k += 1
                decl += " " + lines[k].strip()
            total += 1
            m = re.match(r"NPUC_API\s+(.*?)\b(npuc_\w+)\s*\(", decl)
            ret, name = m.group(1), m.group(2)
            if name.endswith("_defaults"):
                pass
            elif not comment:
                bad.append((h.split("/")[-1], name, "no comment"))
            else:
                if "*" in ret and not re.search(r"own|free|static|borrow|valid|NULL", comment):
                    bad.append((h.split("/")[-1], name, "ownership"))
                if "npuc_status" in ret and not re.search(r"NPUC_ERR|fail|[Ee]rror|status", comment):
                    bad.append((h.split("/")[-1], name, "errors"))
            prev_decl = True
            k += 1
            continue
        if st == "" or st.startswith("#") or st.startswith("typedef") or st.startswith("}") or st.startswith("{") or not prev_decl:
            if st == "" or not st.startswith("NPUC_API"):
                comment = "" if st == "" or st.startswith(("typedef", "}", "#")) else comment
        k += 1
for b in bad: print(*b)
print("declarations:", total, "undocumented:", len(bad))
sys.exit(1 if bad else 0)
