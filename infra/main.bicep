// The function app in Azure: Flex Consumption, Python 3.11, a system-assigned identity that
// reaches storage with roles (the storage account takes no shared keys), Application Insights,
// and every app setting the code reads, with its default (tests/ops/test_settings.py keeps
// this list, local.settings.sample.json and the README's table the same).
//
//   az deployment group create -g <group> -f infra/main.bicep -p appName=<name>
//   func azure functionapp publish <name>

@description('Name of the function app (also the prefix of the other resources).')
param appName string

param location string = resourceGroup().location

@description('Sender address of the notification emails.')
param emailFrom string = 'notifications@example.com'

@description('Key Vault secret URI of the SendGrid API key; empty: emails go to the outbox container.')
param sendGridApiKeySecretUri string = ''

@description('Comma-separated recipients of the nightly import summary; empty: none sent.')
param importReportTo string = ''

@description('Key Vault secret URI of the key (16 to 64 characters) that keys the hash of dependents\' identities; empty: unkeyed. Set it before the first import and keep it.')
param importDependentIdKeySecretUri string = ''

@maxValue(1000)
param maximumInstanceCount int = 100

@description('Client id of the Entra app registration that signs operators in (App Service authentication, app roles Ops.Read and Ops.Operate); empty: no sign-in, operator keys only.')
param operatorAuthClientId string = ''

@description('OPS_OPERATOR_KEYS: comma-separated NAME=<SHA-256 of the key> (python -m shared.operators new-key NAME); empty: none.')
param operatorKeys string = ''

@description('JOB_CALLBACK_ALLOWED_NETWORKS: non-public networks (CIDR) callback receivers may be in, e.g. the virtual network of an internal receiver; empty: public receivers only.')
param callbackAllowedNetworks string = ''

@description('OTEL_EXPORTER_OTLP_ENDPOINT: an OTLP/HTTP endpoint that gets the app\'s spans and metrics too (docs/telemetry.md); empty: Application Insights only.')
param otlpEndpoint string = ''

var storageName = take(toLower(replace('${appName}st${uniqueString(resourceGroup().id)}', '-', '')), 24)
var deploymentContainer = 'app-package'

resource storage 'Microsoft.Storage/storageAccounts@2023-05-01' = {
  name: storageName
  location: location
  kind: 'StorageV2'
  sku: { name: 'Standard_LRS' }
  properties: {
    allowSharedKeyAccess: false // identity only: no account keys, no connection strings
    allowBlobPublicAccess: false
    minimumTlsVersion: 'TLS1_2'
    supportsHttpsTrafficOnly: true
    defaultToOAuthAuthentication: true
  }
}

resource blobService 'Microsoft.Storage/storageAccounts/blobServices@2023-05-01' = {
  parent: storage
  name: 'default'
}

// Job definitions submitted by reference (units_blob); clients write them here with a role
// scoped to this container (Storage Blob Data Contributor) or a SAS.
resource definitionsContainer 'Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01' = {
  parent: blobService
  name: 'job-definitions'
}

resource packageContainer 'Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01' = {
  parent: blobService
  name: deploymentContainer
}

// Run-once records are never deleted one by one: a lifecycle rule removes old ones.
resource lifecycle 'Microsoft.Storage/storageAccounts/managementPolicies@2023-05-01' = {
  parent: storage
  name: 'default'
  properties: {
    policy: {
      rules: [
        {
          name: 'expire-run-once-records'
          enabled: true
          type: 'Lifecycle'
          definition: {
            filters: { blobTypes: [ 'blockBlob' ], prefixMatch: [ 'runonce/' ] }
            actions: { baseBlob: { delete: { daysAfterModificationGreaterThan: 30 } } }
          }
        }
      ]
    }
  }
}

resource workspace 'Microsoft.OperationalInsights/workspaces@2023-09-01' = {
  name: '${appName}-logs'
  location: location
  properties: { sku: { name: 'PerGB2018' }, retentionInDays: 30 }
}

resource insights 'Microsoft.Insights/components@2020-02-02' = {
  name: '${appName}-insights'
  location: location
  kind: 'web'
  properties: { Application_Type: 'web', WorkspaceResourceId: workspace.id }
}

resource plan 'Microsoft.Web/serverfarms@2024-04-01' = {
  name: '${appName}-plan'
  location: location
  kind: 'functionapp'
  sku: { tier: 'FlexConsumption', name: 'FC1' }
  properties: { reserved: true }
}

// Every app setting, with its default. AzureWebJobsStorage is identity-based: the host and the
// code (blobsingleton.from_settings, shared/storage.py) build blob, queue and table URLs from
// the account name and use the app's system-assigned identity.
var appSettings = {
  AzureWebJobsStorage__accountName: storage.name
  APPLICATIONINSIGHTS_CONNECTION_STRING: insights.properties.ConnectionString
  OTEL_EXPORTER_OTLP_ENDPOINT: otlpEndpoint
  LEASE_CONTAINER: 'locks'
  RUNONCE_CONTAINER: 'runonce'
  BLOBSINGLETON_NAMESPACE: ''
  OPS_AUDIT_CONTAINER: 'ops-audit'
  OPS_NOTES_CONTAINER: 'ops-notes'
  NOTIFICATIONS_QUEUE: 'notifications'
  EMAIL_FROM: emailFrom
  EMAIL_FROM_NAME: ''
  EMAIL_OUTBOX_CONTAINER: 'outbox'
  SENDGRID_API_KEY: empty(sendGridApiKeySecretUri) ? '' : '@Microsoft.KeyVault(SecretUri=${sendGridApiKeySecretUri})'
  SENDGRID_HOST: ''
  SENDGRID_TIMEOUT_SECONDS: '10'
  EMAIL_MAX_ATTEMPTS: '4'
  EMAIL_IN_PROGRESS_SECONDS: '15'
  EMAIL_BACKOFF_BASE_SECONDS: '1'
  EMAIL_BACKOFF_MAX_SECONDS: '30'
  EMAIL_RETRY_AFTER_CAP_SECONDS: '60'
  IMPORT_SCHEDULE: '0 0 2 * * *'
  WEBSITE_TIME_ZONE: '' // empty: UTC; an IANA name where the plan honours it
  IMPORT_QUEUE: 'imports'
  IMPORTS_CONTAINER: 'imports'
  IMPORT_ACCOUNTS: ''
  IMPORT_DATABASE_ACCOUNTS: ''
  IMPORT_CHUNK_RECORDS: '5000'
  IMPORT_INVOCATION_BUDGET_S: '240'
  IMPORT_WRITE_LANES: '4'
  IMPORT_MAX_FILE_BYTES: '1073741824'
  IMPORT_MAX_FAMILY_DEPENDENTS: '200'
  IMPORT_MAX_LOOP_SEGMENTS: '2000'
  IMPORT_MAX_REJECTS: '10000'
  IMPORT_MAX_REJECT_BYTES: '16777216'
  IMPORT_DEPENDENT_ID_KEY: empty(importDependentIdKeySecretUri) ? '' : '@Microsoft.KeyVault(SecretUri=${importDependentIdKeySecretUri})'
  MEMBERS_TABLE: 'Members'
  IMPORT_REPORT_TO: importReportTo
  JOBS_CONTAINER: 'jobs'
  JOB_UNITS_QUEUE: 'job-units'
  JOB_WATCH_SCHEDULE: '*/30 * * * * *'
  JOB_MAX_UNITS: '10000'
  JOB_UNIT_HANDLER: 'shared.jobs.handlers:echo'
  JOB_STALL_SECONDS: '60'
  JOB_CALLBACK_TIMEOUT: '10'
  JOB_CALLBACK_ATTEMPTS: '5'
  JOB_CALLBACK_DEADLINE: '60'
  JOB_CALLBACK_GIVE_UP_HOURS: '24'
  JOB_CALLBACK_ALLOWED_NETWORKS: callbackAllowedNetworks
  JOB_CALLBACK_ALLOW_HTTP: 'false' // development only
  JOB_DEFINITIONS_CONTAINER: definitionsContainer.name
  FUNCTIONS_REQUEST_BODY_SIZE_LIMIT: '8388608' // the host refuses larger bodies unread (413)
  OPS_EASY_AUTH: empty(operatorAuthClientId) ? 'false' : 'true'
  OPS_READ_ROLE: 'Ops.Read'
  OPS_OPERATE_ROLE: 'Ops.Operate'
  OPS_OPERATOR_KEYS: operatorKeys
}

resource app 'Microsoft.Web/sites@2024-04-01' = {
  name: appName
  location: location
  kind: 'functionapp,linux'
  identity: { type: 'SystemAssigned' }
  properties: {
    serverFarmId: plan.id
    httpsOnly: true
    siteConfig: {
      minTlsVersion: '1.2'
      appSettings: [for setting in items(appSettings): { name: setting.key, value: setting.value }]
    }
    functionAppConfig: {
      deployment: {
        storage: {
          type: 'blobContainer'
          value: '${storage.properties.primaryEndpoints.blob}${deploymentContainer}'
          authentication: { type: 'SystemAssignedIdentity' }
        }
      }
      scaleAndConcurrency: { maximumInstanceCount: maximumInstanceCount, instanceMemoryMB: 2048 }
      runtime: { name: 'python', version: '3.11' }
    }
  }
  dependsOn: [ packageContainer ]
}

// App Service authentication in front of the app, for the operators' sign-in (shared.operators
// trusts the principal it passes only with OPS_EASY_AUTH=true and the platform's
// WEBSITE_AUTH_ENABLED=True). Unauthenticated requests still reach the app: job clients use
// function keys, and the ops routes refuse callers without an identity themselves.
resource auth 'Microsoft.Web/sites/config@2024-04-01' = if (!empty(operatorAuthClientId)) {
  parent: app
  name: 'authsettingsV2'
  properties: {
    platform: { enabled: true }
    globalValidation: { requireAuthentication: false, unauthenticatedClientAction: 'AllowAnonymous' }
    identityProviders: {
      azureActiveDirectory: {
        enabled: true
        registration: {
          clientId: operatorAuthClientId
          openIdIssuer: '${environment().authentication.loginEndpoint}${tenant().tenantId}/v2.0'
        }
        validation: { allowedAudiences: [ 'api://${operatorAuthClientId}', operatorAuthClientId ] }
      }
    }
    login: { tokenStore: { enabled: true } }
  }
}

// What the app's identity may do on the storage account (nothing else gets access).
var roles = {
  blobDataOwner: 'b7e6dc6d-f1e8-4753-8033-0f276bb0955b' // host, locks, records, files, deployment
  queueDataContributor: '974c5e8b-45b9-4653-ba55-5f855dd0fb88' // triggers, deferral, poison
  tableDataContributor: '0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3' // the Members table
}

resource roleAssignments 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for role in items(roles): {
  name: guid(storage.id, app.id, role.value)
  scope: storage
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', role.value)
    principalId: app.identity.principalId
    principalType: 'ServicePrincipal'
  }
}]

// Arrivals (functions/imports.py import_arrival): a blob trigger with the Event Grid source,
// what Flex Consumption requires. Storage's BlobCreated events reach the host's blobs extension
// webhook for that function, filtered to the imports container's incoming/ folders, so what a
// run writes itself (reports, checkpoints, processed copies) raises no event.
resource storageEvents 'Microsoft.EventGrid/systemTopics@2024-06-01-preview' = {
  name: '${appName}-storage-events'
  location: location
  properties: {
    source: storage.id
    topicType: 'Microsoft.Storage.StorageAccounts'
  }
}

resource arrivals 'Microsoft.EventGrid/systemTopics/eventSubscriptions@2024-06-01-preview' = {
  parent: storageEvents
  name: 'import-arrivals'
  properties: {
    destination: {
      endpointType: 'WebHook'
      properties: {
        endpointUrl: 'https://${app.properties.defaultHostName}/runtime/webhooks/blobs?functionName=Host.Functions.import_arrival&code=${listKeys('${app.id}/host/default', '2024-04-01').systemKeys.blobs_extension}'
      }
    }
    filter: {
      includedEventTypes: [ 'Microsoft.Storage.BlobCreated' ]
      subjectBeginsWith: '/blobServices/default/containers/${appSettings.IMPORTS_CONTAINER}/blobs/'
      advancedFilters: [ { operatorType: 'StringContains', key: 'subject', values: [ '/incoming/' ] } ]
    }
    eventDeliverySchema: 'EventGridSchema'
  }
}

output appUrl string = 'https://${app.properties.defaultHostName}'
output statusPage string = 'https://${app.properties.defaultHostName}/api/status' // sign in, or an operator key
output storageAccount string = storage.name
