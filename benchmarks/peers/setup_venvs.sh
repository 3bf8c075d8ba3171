#!/usr/bin/env bash
# Create one virtualenv per peer under benchmarks/.venvs/<peer> and install it.
#
#   bash benchmarks/peers/setup_venvs.sh            # all peers
#   bash benchmarks/peers/setup_venvs.sh dbos       # only some
#
# langgraph and dbos use python3.11; 10xgraph needs python >= 3.12.
# The floor benchmark (floor.py) runs in the langgraph venv (it only needs psycopg).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venvs="$(cd "$here/.." && pwd)/.venvs"
mkdir -p "$venvs"

find_python() {  # pythonX.Y -> a path that runs it (PATH first, then pyenv's versions)
    local py="$1" ver="${1#python}" cand
    if "$py" -c 'pass' >/dev/null 2>&1; then
        command -v "$py"
        return 0
    fi
    for cand in "${PYENV_ROOT:-$HOME/.pyenv}/versions/$ver".*/bin/"$py"; do
        if [[ -x "$cand" ]]; then
            echo "$cand"
            return 0
        fi
    done
    return 1
}

make_venv() {  # name python packages...
    local name="$1" py
    if ! py="$(find_python "$2")"; then
        echo "setup_venvs: $2 not found; cannot create the $name venv" >&2
        return 1
    fi
    shift 2
    if [[ ! -x "$venvs/$name/bin/python" ]]; then
        "$py" -m venv "$venvs/$name"
    fi
        "$venvs/$name/bin/python" -m pip install --quiet "$@" 2> >(grep -v "is ignored: it is neither" >&2)
    echo "setup_venvs: $name ready: $("$venvs/$name/bin/python" -m pip freeze | grep -iE "^($name|langgraph|dbos|10xgraph|psycopg)" | tr '\n' ' ')"
}

peers=("$@")
if [[ ${#peers[@]} -eq 0 ]]; then
    peers=(langgraph dbos tenxgraph)
fi

for peer in "${peers[@]}"; do
    case "$peer" in
        langgraph)
            make_venv langgraph python3.11 langgraph langgraph-checkpoint-sqlite \
                langgraph-checkpoint-postgres "psycopg[binary]" ;;
        dbos)
            make_venv dbos python3.11 dbos "psycopg[binary]" ;;
        tenxgraph)
            make_venv tenxgraph python3.12 "10xgraph[sqlite-checkpoint,pg-checkpoint]" "psycopg[binary]" ;;
        *)
            echo "setup_venvs: unknown peer '$peer' (langgraph, dbos, tenxgraph)" >&2
            exit 2 ;;
    esac
done
