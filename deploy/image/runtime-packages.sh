#!/bin/sh
# runtime-packages.sh BINARY...
#
# Prints, one a line, the Debian packages that own the shared libraries the
# given binaries load (ldd), so the runtime image installs exactly what the build
# linked against, whatever CMake chose. Fails if a library has no owner (a
# library built from source would be missing from the image).
set -eu

if [ "$#" -eq 0 ]; then
    echo "usage: runtime-packages.sh BINARY..." >&2
    exit 2
fi

libs=$(for bin in "$@"; do
    ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }'
done | sort -u)

missing=0
owners=""
for lib in $libs; do
    # Debian 12 merged /usr, but dpkg still records each file under the path its
    # package shipped it: try the path as ldd gave it, its /usr twin, its real path.
    case $lib in
        /usr/*) twin=${lib#/usr} ;;
        *) twin=/usr$lib ;;
    esac
    owner=""
    for candidate in "$lib" "$twin" "$(readlink -f "$lib")"; do
        owner=$(dpkg-query -S "$candidate" 2>/dev/null | head -n1 | cut -d: -f1) || true
        [ -n "$owner" ] && break
    done
    if [ -z "$owner" ]; then
        echo "runtime-packages.sh: no package owns $lib" >&2
        missing=1
        continue
    fi
    owners="$owners $owner"
done

printf '%s\n' $owners | sort -u
exit "$missing"
