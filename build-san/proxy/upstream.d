build-san/proxy/upstream.o: proxy/upstream.c proxy/upstream.h \
 protocol/resp.h proxy/server.h proxy/config.h proxy/client.h proxy/log.h
proxy/upstream.h:
protocol/resp.h:
proxy/server.h:
proxy/config.h:
proxy/client.h:
proxy/log.h:
