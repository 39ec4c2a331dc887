build-san/proxy/main.o: proxy/main.c proxy/config.h proxy/log.h \
 proxy/server.h protocol/resp.h
proxy/config.h:
proxy/log.h:
proxy/server.h:
protocol/resp.h:
