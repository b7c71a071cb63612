# squid with ssl_bump as an intercepting peer for tests/bench/intercept.sh:
# Debian's squid-openssl (apt-get install -y squid-openssl, which replaces
# the squid package and serves ../shared/bench's squid peer as well;
# tests/bench/intercept.sh installs it when missing). Its own CA (EC P-256,
# made here with openssl), leaves minted by security_file_certgen into a
# per-start database and kept in squid's memory cache, every CONNECT
# bumped, upstream TLS verified against the campaign's upstream certificate
# (ICPT_UP_CA, else the harness's). The campaign's host names (ICPT_HOSTS,
# for the first-CONNECT probe) resolve to the upstream through a hosts_file.
# Access log on, as for the harness's squid peer. peer_render sets PEER_ENV
# with BN_INTERCEPT_CA, the CA file the clients must trust.
PEER_VERSION="$(squid -v 2>&1 | head -1) ssl_bump"
peer_render() {
	local listen=$1 port=$2 dir=$3
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
	    -keyout "$dir/ca.key" -out "$dir/ca.pem" -days 2 \
	    -subj "/CN=bench squid ssl_bump CA" \
	    -addext "basicConstraints=critical,CA:TRUE" \
	    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
	cp "$dir/ca.pem" "$dir/client-ca.pem"
	/usr/lib/squid/security_file_certgen -c -s "$dir/ssl_db" -M 16MB \
	    >/dev/null
	sed -e "s|@LISTEN@|$listen|g" -e "s|@PORT@|$port|g" \
	    -e "s|@DIR@|$dir|g" -e "s|@NOFILE@|$NOFILE|g" \
	    -e "s|@UPCA@|${ICPT_UP_CA:-$BENCH_DIR/upstream/cert.pem}|g" \
	    "$PEER_DEF_DIR/squid-bump.conf.in" > "$dir/squid.conf"
	local h
	for h in ${ICPT_HOSTS:-}; do echo "${ICPT_UP_IP:-$UP_IP} $h"; done > "$dir/hosts"
	chown -R proxy:proxy "$dir"
	PEER_ENV=("BN_INTERCEPT_CA=$dir/client-ca.pem")
	PEER_CMD=(squid -N -f "$dir/squid.conf")
}
