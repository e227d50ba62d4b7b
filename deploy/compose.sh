# Sourced by the deploy scripts: picks Debian's docker-compose or the docker compose plugin.
if docker compose version >/dev/null 2>&1; then
  compose="docker compose"
elif command -v docker-compose >/dev/null 2>&1; then
  compose="docker-compose"
else
  echo "neither 'docker compose' nor 'docker-compose' is installed" >&2
  exit 1
fi
